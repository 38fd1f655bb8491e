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

/** The typed error for anything a call threw. */
export function toEffectGateError(thrown: unknown): EffectGateError {
  if (thrown instanceof EffectGateError) {
    return thrown;
  }
  const error = ConnectError.from(thrown);
  const reason = error.findDetails(ErrorInfoSchema)[0]?.reason;
  const Kind = reason === "PAYLOAD_MISMATCH" ? PayloadMismatch : (byCode.get(error.code) ?? EffectGateError);
  return new Kind(error);
}
