// The effectgate client for Node: gRPC over HTTP/2 through @connectrpc/connect-node, the run
// context from AsyncLocalStorage, typed payloads and typed errors, opt-in safe retries.
import { type DescMessage, type Message, type Registry, create } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import { type Client, Code, type Interceptor, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { type RunContext, currentContext } from "./context.js";
import { type EffectGateError, toEffectGateError } from "./errors.js";
import {
  type Action,
  EffectGateway,
  EffectState,
  type ExecuteResponse,
  type ListActionsResponse,
  Operator,
  RunContextSchema,
  type VerifyResponse,
  type WaitActionResponse,
  WaitUntil,
} from "./gen/effectgate/v1/gateway_pb.js";
import { pack, payloadRegistry } from "./payloads.js";
import { type ConnectionOptions, type Settings, baseUrl, resolveSettings, tlsOptions } from "./settings.js";
import { type TracerProviderLike, tracingInterceptor } from "./tracing.js";

/** Retries for the cases where calling again cannot make a second effect: UNAVAILABLE (nothing
 * was sent; or STORE_UNAVAILABLE_AFTER_SEND: the effect may exist and the gateway verifies it
 * before any re-send) and ABORTED/IN_FLIGHT (another call drives the same action). The same run,
 * step, tool and scope are the same action, so the gateway answers with the stored outcome. */
export interface RetryPolicy {
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  totalBudgetMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 5, initialBackoffMs: 200, maxBackoffMs: 5000, totalBudgetMs: 60000 };

export interface ClientOptions extends ConnectionOptions {
  /** Per-call deadline (default 30 s). */
  timeoutMs?: number;
  /** true or a policy: retry the safe cases, honouring RetryInfo. Off by default. */
  retry?: boolean | Partial<RetryPolicy>;
  /** Schemas of custom payload messages (ChargeCard, SendEmail and Struct are built in). */
  payloadTypes?: DescMessage[];
  /** Called before each retry (logging). */
  onRetry?: (error: EffectGateError, delayMs: number, attempt: number) => void;
  /** true or a TracerProvider: each call gets a CLIENT span under the active OpenTelemetry span
   * and sends its `traceparent` to the gateway (needs @opentelemetry/api installed). */
  tracing?: boolean | TracerProviderLike;
}

export interface ExecuteOptions {
  scope: string;
  toolCallId?: string;
  context?: RunContext;
  timeoutMs?: number;
  bypass?: boolean;
}

export interface ListOptions {
  state?: EffectState;
  runId?: string;
  tool?: string;
  pageSize?: number;
}

export interface WaitOptions {
  /** "decided" (default): no longer waiting for a person; "settled": CONFIRMED, REJECTED,
   * NOT_FOUND or UNKNOWN, what an execute answers. */
  until?: "decided" | "settled";
  /** How long the gateway waits at most (default 30 s, at most 300 s). */
  timeoutMs?: number;
}

/** The call's own deadline is the wait's plus this: the gateway answers (reached or not) before it. */
const WAIT_SLACK_MS = 10000;
const WAIT_MAX_MS = 300000;

export function retryDelayMs(policy: RetryPolicy, error: EffectGateError, attempt: number, elapsedMs: number): number | undefined {
  const safe = error.code === Code.Unavailable || (error.code === Code.Aborted && error.reason === "IN_FLIGHT");
  if (!safe || attempt >= policy.maxAttempts) {
    return undefined;
  }
  const wait = error.retryAfterMs ?? Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (attempt - 1));
  return elapsedMs + wait > policy.totalBudgetMs ? undefined : Math.max(wait, 0);
}

export class EffectGateClient {
  readonly settings: Settings;
  readonly agent: Client<typeof EffectGateway>;
  readonly operator: Client<typeof Operator>;
  private readonly sessions: Http2SessionManager;
  private readonly registry: Registry;
  private readonly retry: RetryPolicy | undefined;
  private readonly timeoutMs: number;
  private readonly onRetry: ClientOptions["onRetry"];

  constructor(options: ClientOptions = {}) {
    this.settings = resolveSettings(options);
    const url = baseUrl(this.settings);
    this.sessions = new Http2SessionManager(url, {}, tlsOptions(this.settings));
    const token = this.settings.token;
    const auth: Interceptor = (next) => (req) => {
      if (token) {
        req.header.set("authorization", `Bearer ${token}`);
      }
      return next(req);
    };
    const interceptors = [auth];
    if (options.tracing) {
      const { hostname, port } = new URL(url);
      const provider = options.tracing === true ? undefined : options.tracing;
      const server = { host: hostname, port: port ? Number(port) : this.settings.tls ? 443 : 80 };
      interceptors.push(tracingInterceptor(provider, server));
    }
    const transport = createGrpcTransport({ baseUrl: url, sessionManager: this.sessions, interceptors });
    this.agent = createClient(EffectGateway, transport);
    this.operator = createClient(Operator, transport);
    this.registry = payloadRegistry(options.payloadTypes);
    this.retry = options.retry ? { ...DEFAULT_RETRY, ...(options.retry === true ? {} : options.retry) } : undefined;
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.onRetry = options.onRetry;
  }

  /** Closes the HTTP/2 connection (the client cannot be used afterwards). */
  close(): void {
    this.sessions.abort();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  private async call<T>(send: (timeoutMs: number) => Promise<T>, timeoutMs: number | undefined, retry: boolean): Promise<T> {
    const policy = retry ? this.retry : undefined;
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await send(timeoutMs ?? this.timeoutMs);
      } catch (thrown) {
        const error = toEffectGateError(thrown);
        const wait = policy ? retryDelayMs(policy, error, attempt, Date.now() - started) : undefined;
        if (wait === undefined) {
          throw error;
        }
        this.onRetry?.(error, wait, attempt + 1);
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  /** Performs `tool` once for the current (run, step, scope). Safe to call again with the same
   * context after any error or timeout: the answer is the same action. */
  execute(tool: string, payload: Message, options: ExecuteOptions): Promise<ExecuteResponse> {
    const ctx = options.context ?? currentContext();
    const request = {
      context: create(RunContextSchema, ctx),
      tool,
      scope: options.scope,
      payload: pack(this.registry, payload),
      toolCallId: options.toolCallId || `call-${randomUUID().slice(0, 12)}`,
      bypass: options.bypass ?? false,
    };
    return this.call((t) => this.agent.execute(request, { timeoutMs: t }), options.timeoutMs, true);
  }

  /** Reads the provider's state back now: by action id, or by (run context, tool, scope). */
  verify(target: string | { tool: string; scope: string; context?: RunContext }, timeoutMs?: number): Promise<VerifyResponse> {
    const request =
      typeof target === "string"
        ? { target: { case: "actionId" as const, value: target } }
        : {
            target: {
              case: "ref" as const,
              value: {
                context: create(RunContextSchema, target.context ?? currentContext()),
                tool: target.tool,
                scope: target.scope,
              },
            },
          };
    return this.call((t) => this.agent.verify(request, { timeoutMs: t }), timeoutMs, true);
  }

  get(actionId: string, timeoutMs?: number): Promise<Action> {
    return this.call((t) => this.agent.getAction({ actionId }, { timeoutMs: t }), timeoutMs, true);
  }

  /** ListActions page by page (oldest first) until the gateway gives no page token. */
  async *pages(options: ListOptions = {}): AsyncGenerator<ListActionsResponse> {
    let pageToken = "";
    do {
      const request = {
        state: options.state ?? EffectState.UNSPECIFIED,
        runId: options.runId ?? "",
        tool: options.tool ?? "",
        pageSize: options.pageSize ?? 100,
        pageToken,
      };
      const page = await this.call((t) => this.agent.listActions(request, { timeoutMs: t }), undefined, true);
      yield page;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** Every matching action: `for await (const a of client.list({ state: EffectState.UNKNOWN }))`. */
  async *list(options: ListOptions = {}): AsyncGenerator<Action> {
    for await (const page of this.pages(options)) {
      yield* page.actions;
    }
  }

  /** Waits on the gateway until the action is decided (or settled) or the timeout passes:
   * `reached` says which, `action` is the action then. Writes nothing, so it is retried like a read;
   * a decision made on any replica ends it. */
  wait(actionId: string, options: WaitOptions = {}): Promise<WaitActionResponse> {
    const timeoutMs = Math.max(options.timeoutMs ?? 30000, 0);
    const until = options.until === "settled" ? WaitUntil.SETTLED : WaitUntil.DECIDED;
    const whole = Math.floor(timeoutMs / 1000);
    const timeout = { seconds: BigInt(whole), nanos: Math.round((timeoutMs - whole * 1000) * 1e6) };
    const deadline = Math.min(timeoutMs, WAIT_MAX_MS) + WAIT_SLACK_MS;
    return this.call((t) => this.agent.waitAction({ actionId, until, timeout }, { timeoutMs: t }), deadline, true);
  }

  // Operator calls (role: operator); never retried automatically.

  approve(actionId: string, note: string, timeoutMs?: number): Promise<Action> {
    return this.call((t) => this.operator.approve({ actionId, note }, { timeoutMs: t }), timeoutMs, false);
  }

  deny(actionId: string, note: string, timeoutMs?: number): Promise<Action> {
    return this.call((t) => this.operator.deny({ actionId, note }, { timeoutMs: t }), timeoutMs, false);
  }

  reconcile(
    actionId: string,
    resolution: EffectState.CONFIRMED | EffectState.REJECTED | EffectState.NOT_FOUND,
    note: string,
    externalId = "",
    timeoutMs?: number,
  ): Promise<Action> {
    const request = { actionId, resolution, note, externalId };
    return this.call((t) => this.operator.reconcile(request, { timeoutMs: t }), timeoutMs, false);
  }

  grantBypass(actionId: string, note: string, timeoutMs?: number): Promise<Action> {
    return this.call((t) => this.operator.grantBypass({ actionId, note }, { timeoutMs: t }), timeoutMs, false);
  }
}
