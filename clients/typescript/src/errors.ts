// Typed errors of the gateway's error contract, decoded from the google.rpc details that
// Connect reads off the gRPC trailers (ErrorInfo, RetryInfo, BadRequest). Each class extends
// ConnectError, so `instanceof ConnectError` and `findDetails` keep working.
import { Code, ConnectError } from "@connectrpc/connect";
import { ActionSchema, type Action } from "./gen/effectgate/v1/gateway_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export class EffectGateError extends ConnectError {
  /** ErrorInfo.reason ("" when the error did not come from the gateway, e.g. no connection). */
  readonly reason: string;
  /** ErrorInfo.metadata: action_id, fingerprints, state... */
  readonly info: Readonly<Record<string, string>>;
  /** RetryInfo.retry_delay in milliseconds, when the gateway says when to call again. */
  readonly retryAfterMs: number | undefined;

  constructor(source: ConnectError) {
    super(source.rawMessage, source.code, source.metadata, undefined, source.cause);
    this.details = source.details;
    const info = source.findDetails(ErrorInfoSchema)[0];
    this.reason = info?.reason ?? "";
    this.info = { ...(info?.metadata ?? {}) };
    const retry = source.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryAfterMs = retry ? Number(retry.seconds) * 1000 + retry.nanos / 1e6 : undefined;
  }

  // ConnectError's instanceof is duck-typed (any ConnectError would pass as a PayloadMismatch);
  // the typed errors use the prototype chain. They keep the name "ConnectError", so that
  // `instanceof ConnectError` still holds for them.
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === "object" && value !== null && Object.prototype.isPrototypeOf.call(this.prototype, value);
  }

  get actionId(): string {
    return this.info["action_id"] ?? "";
  }
}

/** INVALID_ARGUMENT: fix the request; `fieldViolations` names the fields. */
export class InvalidRequest extends EffectGateError {
  get fieldViolations(): { field: string; description: string }[] {
    return this.findDetails(BadRequestSchema).flatMap((b) =>
      b.fieldViolations.map((v) => ({ field: v.field, description: v.description })),
    );
  }
}
export class Unauthenticated extends EffectGateError {}
export class PermissionDenied extends EffectGateError {}
export class NotFound extends EffectGateError {}
/** FAILED_PRECONDITION/PAYLOAD_MISMATCH: this action was first executed with another payload. */
export class PayloadMismatch extends EffectGateError {
  get storedFingerprint(): string {
    return this.info["stored_fingerprint"] ?? "";
  }
  get fingerprint(): string {
    return this.info["fingerprint"] ?? "";
  }
}
/** FAILED_PRECONDITION for another reason (BYPASS_NOT_GRANTED, ...). */
export class PolicyConflict extends EffectGateError {}
/** FAILED_PRECONDITION/RECORD_VERSION_TOO_NEW: a newer gateway release stored this action (a
 * rolling upgrade under way); this replica cannot read it and changed nothing. A replica of the
 * newer release answers it; `storedVersion` and `readableVersion` say which record versions. */
export class RecordTooNew extends PolicyConflict {
  get storedVersion(): string {
    return this.info["stored_version"] ?? "";
  }
  get readableVersion(): string {
    return this.info["readable_version"] ?? "";
  }
}
/** ALREADY_EXISTS/ALREADY_EXECUTED: the tool refuses repeats; `action` is the stored one. */
export class AlreadyExecuted extends EffectGateError {
  get action(): Action | undefined {
    return this.findDetails(ActionSchema)[0];
  }
}
/** ABORTED/IN_FLIGHT: another call drives this action; call again after `retryAfterMs`. */
export class InFlight extends EffectGateError {}
/** UNAVAILABLE: nothing was sent; call again (same run context) after `retryAfterMs`. Reason
 * STORE_UNAVAILABLE_AFTER_SEND: the effect may exist; the same run context is still safe (the
 * gateway verifies before any re-send), a new one is not. */
export class Unavailable extends EffectGateError {}
/** DEADLINE_EXCEEDED: the outcome is not known yet; the same call later returns it. */
export class DeadlineExceeded extends EffectGateError {}
/** RESOURCE_EXHAUSTED from a tool's limit: nothing was stored or sent. `info` holds the figures
 * (limit, budget, spent, left, amount, currency, max_effects, effects, window_resets_at). */
export class LimitExceeded extends EffectGateError {
  get limit(): string {
    return this.info["limit"] ?? "";
  }
  get left(): number | undefined {
    const left = this.info["left"];
    return left === undefined ? undefined : Number(left);
  }
}
/** RESOURCE_EXHAUSTED/BUDGET_EXCEEDED: the amount does not fit what is left of the budget. */
export class BudgetExceeded extends LimitExceeded {}
/** RESOURCE_EXHAUSTED/RATE_LIMITED: effects per window used up; call again after `retryAfterMs`. */
export class RateLimited extends LimitExceeded {}
/** ALREADY_EXISTS/SCOPE_TAKEN: one effect per scope, and another run or step holds it. */
export class ScopeTaken extends AlreadyExecuted {}
/** UNAVAILABLE/CIRCUIT_OPEN: the provider failed too often; new actions paused for `retryAfterMs`. */
export class CircuitOpen extends Unavailable {}

const byCode = new Map<Code, new (e: ConnectError) => EffectGateError>([
  [Code.InvalidArgument, InvalidRequest],
  [Code.Unauthenticated, Unauthenticated],
  [Code.PermissionDenied, PermissionDenied],
  [Code.NotFound, NotFound],
  [Code.FailedPrecondition, PolicyConflict],
  [Code.AlreadyExists, AlreadyExecuted],
  [Code.Aborted, InFlight],
  [Code.Unavailable, Unavailable],
  [Code.DeadlineExceeded, DeadlineExceeded],
]);

const byReason = new Map<string, new (e: ConnectError) => EffectGateError>([
  ["PAYLOAD_MISMATCH", PayloadMismatch],
  ["RECORD_VERSION_TOO_NEW", RecordTooNew],
  ["BUDGET_EXCEEDED", BudgetExceeded],
  ["RATE_LIMITED", RateLimited],
  ["SCOPE_TAKEN", ScopeTaken],
  ["CIRCUIT_OPEN", CircuitOpen],
]);

/** The typed error for anything a call threw. */
export function toEffectGateError(thrown: unknown): EffectGateError {
  if (thrown instanceof EffectGateError) {
    return thrown;
  }
  const error = ConnectError.from(thrown);
  const reason = error.findDetails(ErrorInfoSchema)[0]?.reason ?? "";
  const Kind = byReason.get(reason) ?? byCode.get(error.code) ?? EffectGateError;
  return new Kind(error);
}
