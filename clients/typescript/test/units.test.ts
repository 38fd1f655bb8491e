// Unit tests of single functions: payload packing, retry decisions, settings, run context.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  DEFAULT_RETRY,
  ErrorInfoSchema,
  InFlight,
  PolicyConflict,
  RecordTooNew,
  Unavailable,
  chargeCard,
  currentContext,
  pack,
  payloadRegistry,
  retryDelayMs,
  stableStepId,
  struct,
  toEffectGateError,
  withRun,
  withStep,
  withSubagent,
} from "../src/index.js";
import { resolveSettings } from "../src/settings.js";
import { ActionSchema } from "../src/gen/effectgate/v1/gateway_pb.js";
import { RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";

test("payloads are packed in Any by their schema; unknown types are refused", () => {
  const registry = payloadRegistry();
  const packed = pack(registry, chargeCard({ customer: "cus_1", amount: 5, currency: "usd" }));
  assert.equal(packed.typeUrl, "type.googleapis.com/effectgate.tools.v1.ChargeCard");
  const json = pack(registry, struct({ invoice: "inv_1", amount: 12 }));
  assert.equal(json.typeUrl, "type.googleapis.com/google.protobuf.Struct");
  assert.ok(anyUnpack(json, registry));
  assert.throws(() => pack(registry, create(ActionSchema)), /unknown to this client/);
  assert.equal(pack(payloadRegistry([ActionSchema]), create(ActionSchema)).typeUrl.endsWith("effectgate.v1.Action"), true);
});

function wireError(code: Code, reason: string, retrySeconds?: number, metadata: Record<string, string> = {}): ConnectError {
  const details = [
    { desc: ErrorInfoSchema, value: { reason, domain: "effectgate.dev", metadata: { action_id: "act_1", ...metadata } } },
    ...(retrySeconds === undefined ? [] : [{ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(retrySeconds), nanos: 500_000_000 } } }]),
  ];
  // As Connect parses them off the wire: type names and bytes.
  const error = new ConnectError("m", code);
  error.details = details.map((d) => ({ type: d.desc.typeName, value: toBinary(d.desc, create(d.desc, d.value as never)) }));
  return error;
}

test("reasons map to typed errors; RetryInfo drives the retry delay", () => {
  const limited = toEffectGateError(wireError(Code.Unavailable, "PROVIDER_RATE_LIMITED", 2));
  assert.ok(limited instanceof Unavailable && limited instanceof ConnectError);
  assert.equal(limited.reason, "PROVIDER_RATE_LIMITED");
  assert.equal(limited.retryAfterMs, 2500);
  assert.equal(limited.actionId, "act_1");
  assert.equal(retryDelayMs(DEFAULT_RETRY, limited, 1, 0), 2500);
  assert.equal(retryDelayMs({ ...DEFAULT_RETRY, totalBudgetMs: 2000 }, limited, 1, 0), undefined);
  const inFlight = toEffectGateError(wireError(Code.Aborted, "IN_FLIGHT"));
  assert.ok(inFlight instanceof InFlight);
  assert.equal(retryDelayMs(DEFAULT_RETRY, inFlight, 2, 0), 400, "no RetryInfo: exponential back-off");
  const future = toEffectGateError(wireError(Code.FailedPrecondition, "SOMETHING_NEW"));
  assert.ok(future instanceof PolicyConflict && !(future instanceof InFlight));
  assert.equal(retryDelayMs(DEFAULT_RETRY, future, 1, 0), undefined);
  assert.ok(!(new ConnectError("plain", Code.Aborted) instanceof InFlight), "a plain ConnectError is no InFlight");
});

test("a record too new is a RecordTooNew naming both versions, still a PolicyConflict", () => {
  const versions = { stored_version: "5", readable_version: "4" };
  const tooNew = toEffectGateError(wireError(Code.FailedPrecondition, "RECORD_VERSION_TOO_NEW", undefined, versions));
  assert.ok(tooNew instanceof RecordTooNew && tooNew instanceof PolicyConflict && tooNew instanceof ConnectError);
  assert.equal(tooNew.reason, "RECORD_VERSION_TOO_NEW");
  assert.equal(tooNew.storedVersion, "5");
  assert.equal(tooNew.readableVersion, "4");
  assert.equal(tooNew.actionId, "act_1");
  assert.equal(retryDelayMs(DEFAULT_RETRY, tooNew, 1, 0), undefined, "never retried: the same replica answers the same");
  const other = toEffectGateError(wireError(Code.FailedPrecondition, "NOT_SETTLED"));
  assert.ok(other instanceof PolicyConflict && !(other instanceof RecordTooNew));
});

test("settings come from options, then the environment", () => {
  const env = { EFFECTGATE_TARGET: "gw:1", EFFECTGATE_TOKEN: "t", EFFECTGATE_TLS_CA: "/ca.pem" };
  assert.deepEqual(resolveSettings({}, env), { target: "gw:1", token: "t", tls: true, caFile: "/ca.pem", certFile: "", keyFile: "" });
  assert.equal(resolveSettings({ target: "other:2", token: "" }, env).token, "");
  assert.equal(resolveSettings({}, {}).target, "127.0.0.1:50051");
  assert.throws(() => resolveSettings({ certFile: "/c.pem" }, {}), /both certFile and keyFile/);
});

test("run context: steps and subagents inherit the run, contexts stay apart", async () => {
  assert.throws(() => currentContext(), /no effectgate run context/);
  await withRun({ runId: "r1", agent: "planner" }, () =>
    withStep("s1", async () => {
      const seen = await Promise.all(
        ["a", "b"].map((name) =>
          withSubagent(name, async () => {
            await new Promise((resolve) => setTimeout(resolve, 5));
            return currentContext();
          }),
        ),
      );
      assert.deepEqual(seen.map((c) => `${c.runId}/${c.stepId}/${c.agent}`), ["r1/s1/a", "r1/s1/b"]);
      assert.equal(currentContext().agent, "planner");
    }),
  );
  assert.equal(stableStepId("node", 3), stableStepId("node", 3));
  assert.notEqual(stableStepId("node", 3), stableStepId("node", 4));
});
