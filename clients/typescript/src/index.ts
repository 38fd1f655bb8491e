// @effectgate/client: exactly-once side effects for AI agents, from Node.
export { EffectGateClient, DEFAULT_RETRY, retryDelayMs } from "./client.js";
export type { ClientOptions, ExecuteOptions, ListOptions, RetryPolicy, WaitOptions } from "./client.js";
export { EffectNotSettled, describeAnswer, effectExecute, effectTool, toolContext } from "./ai.js";
export type { EffectExecuteOptions, EffectToolOptions, EffectToolResult, SchemaInput } from "./ai.js";
export { currentContext, stableStepId, withRun, withStep, withSubagent } from "./context.js";
export type { RunContext, RunOptions } from "./context.js";
export {
  AlreadyExecuted,
  BudgetExceeded,
  CircuitOpen,
  DeadlineExceeded,
  EffectGateError,
  InFlight,
  InvalidRequest,
  LimitExceeded,
  NotFound,
  PayloadMismatch,
  PermissionDenied,
  PolicyConflict,
  RateLimited,
  RecordTooNew,
  ScopeTaken,
  Unauthenticated,
  Unavailable,
  toEffectGateError,
} from "./errors.js";
export { chargeCard, pack, payloadRegistry, sendEmail, struct } from "./payloads.js";
export type { ConnectionOptions } from "./settings.js";
export { tracingInterceptor } from "./tracing.js";
export type { TracerProviderLike } from "./tracing.js";
export { EffectState, EffectState as State, NextStep, ObservationOutcome, WaitUntil } from "./gen/effectgate/v1/gateway_pb.js";
export type { Action, ExecuteResponse, VerifyResponse, WaitActionResponse } from "./gen/effectgate/v1/gateway_pb.js";
export { ChargeCardSchema, SendEmailSchema } from "./gen/effectgate/tools/v1/tools_pb.js";
export type { ChargeCard, SendEmail } from "./gen/effectgate/tools/v1/tools_pb.js";
export { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
