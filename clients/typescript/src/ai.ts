// Vercel AI SDK tools whose effect goes through effectgate. `effectTool(...)` is an object that
// the SDK's `tool()` accepts as it is (description, inputSchema, execute); `effectExecute(...)`
// is just the `execute` function, for a `tool({...})` you write yourself. Nothing here imports
// the `ai` package: the shapes are the SDK's, checked by the tests against the real package.
//
// The key is never the model's toolCallId (new on every re-plan): the run comes from
// `withRun(...)` (AsyncLocalStorage), the step from `withStep(...)` if the app named one, else
// from `step`, else the gateway tool's name; the scope from the app (`scope`), never the input.
import type { Message } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { EffectGateClient } from "./client.js";
import { type RunContext, currentContext } from "./context.js";
import { type EffectGateError, toEffectGateError } from "./errors.js";
import { EffectState, type ExecuteResponse } from "./gen/effectgate/v1/gateway_pb.js";

export interface EffectToolResult {
  state: string;
  actionId: string;
  replayed: boolean;
  externalId?: string;
  reason?: string;
  /** What the model should do next, in words. */
  advice: string;
}

export interface EffectExecuteOptions {
  /** The business object the effect is about ("order:1093"); a function reads it from the app. */
  scope: string | (() => string);
  /** The logical step when the app did not name one with withStep (default: the tool's name). */
  step?: string;
  timeoutMs?: number;
}

/** The input type a schema validates to: Standard Schema (zod and others) or the SDK's jsonSchema<T>(). */
export type SchemaInput<SCHEMA> = SCHEMA extends { readonly "~standard": { readonly types?: infer T } }
  ? NonNullable<T> extends { readonly output: infer O }
    ? O
    : unknown
  : SCHEMA extends { readonly _type: infer O }
    ? O
    : unknown;

export interface EffectToolOptions<SCHEMA, INPUT = SchemaInput<SCHEMA>> extends EffectExecuteOptions {
  client: EffectGateClient;
  /** The gateway's tool ("charge_card"). */
  tool: string;
  description?: string;
  /** Any schema the SDK takes (zod, jsonSchema(...)). */
  inputSchema: SCHEMA;
  /** The payload message from the model's input. */
  payload: (input: INPUT) => Message;
}

/** Raised (so the SDK reports a tool error to the model) when the gateway did not settle the call:
 * unreachable, the same action in flight, or the deadline passed. Calling again is the same action. */
export class EffectNotSettled extends Error {
  constructor(override readonly cause: EffectGateError) {
    super(
      `effectgate did not settle the call yet (${Code[cause.code]}: ${cause.rawMessage}). ` +
        "Call this tool again with the same input: it is the same action, never a second effect.",
    );
  }
}

const STATE_ADVICE: Partial<Record<EffectState, string>> = {
  [EffectState.CONFIRMED]: "Done.",
  [EffectState.REJECTED]: "The provider refused; nothing happened. Tell the user; do not retry with other input.",
  [EffectState.AWAITING_APPROVAL]:
    "Waiting for a person to approve it; nothing was sent yet. Do not retry with other arguments and do not use another tool for the same purpose: call this tool again in the same step later to get the outcome.",
};
const NOT_PROVEN =
  "Not proven yet: do not retry with other input and do not use another tool for the same purpose; the operator queue has it.";

export function describeAnswer(answer: ExecuteResponse): EffectToolResult {
  const action = answer.action;
  const state = action?.state ?? EffectState.UNSPECIFIED;
  const result: EffectToolResult = {
    state: EffectState[state],
    actionId: action?.actionId ?? "",
    replayed: answer.replayed,
    advice: STATE_ADVICE[state] ?? NOT_PROVEN,
  };
  if (action?.receipt?.externalId) {
    result.externalId = action.receipt.externalId;
  }
  if (action?.reason) {
    result.reason = action.reason;
  }
  return result;
}

/** The run context of a tool call: the app's run and step, never the tool-call id. */
export function toolContext(tool: string, step?: string): RunContext {
  const ctx = currentContext();
  return { ...ctx, stepId: ctx.stepId || step || tool };
}

const UNSETTLED = new Set([Code.Unavailable, Code.Aborted, Code.DeadlineExceeded]);

/** An SDK `execute(input, { toolCallId })` that performs `tool` once per (run, step, scope). */
export function effectExecute<INPUT>(
  client: EffectGateClient,
  tool: string,
  payload: (input: INPUT) => Message,
  options: EffectExecuteOptions,
): (input: INPUT, call: { toolCallId: string }) => Promise<EffectToolResult> {
  return async (input, call) => {
    const context = toolContext(tool, options.step);
    const scope = typeof options.scope === "function" ? options.scope() : options.scope;
    try {
      const answer = await client.execute(tool, payload(input), {
        scope,
        context,
        toolCallId: call.toolCallId, // tracing only
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      });
      return describeAnswer(answer);
    } catch (thrown) {
      const error = toEffectGateError(thrown);
      if (UNSETTLED.has(error.code)) {
        throw new EffectNotSettled(error);
      }
      return {
        state: "REFUSED",
        actionId: error.actionId,
        replayed: false,
        reason: error.reason || Code[error.code],
        advice: `effectgate refused the call (${error.rawMessage}); nothing new was sent. Do not retry with other input.`,
      };
    }
  };
}

/** A tool for the AI SDK (`tool(effectTool({...}))` or as it is in `tools: {...}`). */
export function effectTool<SCHEMA, INPUT = SchemaInput<SCHEMA>>(options: EffectToolOptions<SCHEMA, INPUT>): {
  description?: string;
  inputSchema: SCHEMA;
  execute: (input: INPUT, call: { toolCallId: string }) => Promise<EffectToolResult>;
} {
  return {
    ...(options.description !== undefined ? { description: options.description } : {}),
    inputSchema: options.inputSchema,
    execute: effectExecute(options.client, options.tool, options.payload, options),
  };
}
