// The TypeScript client against a real `effectgate serve` in front of the Stripe simulator.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { ConnectError } from "@connectrpc/connect";
import {
  EffectGateClient,
  ErrorInfoSchema,
  InvalidRequest,
  NotFound,
  PayloadMismatch,
  State,
  chargeCard,
  currentContext,
  withRun,
  withStep,
  withSubagent,
} from "../src/index.js";
import { LiveGateway } from "./harness.js";

describe("EffectGateClient against a real gateway", () => {
  let gateway: LiveGateway;
  let client: EffectGateClient;

  before(async () => {
    gateway = await LiveGateway.start();
    client = new EffectGateClient({ target: gateway.target, retry: true });
  });
  after(async () => {
    client.close();
    await gateway.stop();
  });

  test("20 concurrent executes of one action make one effect", async () => {
    const card = chargeCard({ customer: "cus_twenty", amount: 1500, currency: "usd", paymentMethod: "pm_card_visa" });
    const answers = await withRun("ts-run-20", () =>
      withStep("charge-deposit", () =>
        Promise.all(Array.from({ length: 20 }, (_, i) => client.execute("charge_card", card, { scope: "order:20", toolCallId: `call-${i}` }))),
      ),
    );
    assert.equal(new Set(answers.map((a) => a.action!.actionId)).size, 1);
    assert.ok(answers.every((a) => a.action!.state === State.CONFIRMED));
    assert.equal(answers.filter((a) => !a.replayed).length, 1, "one caller drove it, the others got its outcome");
    assert.equal(await gateway.effects("cus_twenty"), 1);
  });

  test("two subagents in separate async contexts make one action", async () => {
    const card = chargeCard({ customer: "cus_sub", amount: 900, currency: "eur", paymentMethod: "pm_card_visa" });
    const seen: string[] = [];
    const subagent = (name: string) =>
      withSubagent(name, async () => {
        await new Promise((resolve) => setImmediate(resolve));
        seen.push(`${currentContext().agent}@${currentContext().stepId}`);
        return client.execute("charge_card", card, { scope: "order:sub" });
      });
    const [a, b] = await withRun({ runId: "ts-run-sub", agent: "planner" }, () =>
      withStep("charge", () => Promise.all([subagent("researcher"), subagent("biller")])),
    );
    assert.deepEqual(seen.sort(), ["biller@charge", "researcher@charge"]);
    assert.equal(a!.action!.actionId, b!.action!.actionId);
    assert.ok(["researcher", "biller"].includes(a!.action!.context!.agent));
    assert.equal(await gateway.effects("cus_sub"), 1);
  });

  test("a mismatch is a typed error with reason PAYLOAD_MISMATCH", async () => {
    const first = chargeCard({ customer: "cus_mm", amount: 1000, currency: "usd", paymentMethod: "pm_card_visa" });
    const other = chargeCard({ customer: "cus_mm", amount: 999, currency: "usd", paymentMethod: "pm_card_visa" });
    await withRun("ts-run-mm", () =>
      withStep("charge", async () => {
        const stored = await client.execute("charge_card", first, { scope: "order:mm" });
        const error = await client.execute("charge_card", other, { scope: "order:mm" }).then(
          () => assert.fail("no error"),
          (e: unknown) => e,
        );
        assert.ok(error instanceof PayloadMismatch && error instanceof ConnectError);
        assert.equal(error.reason, "PAYLOAD_MISMATCH");
        assert.equal(error.findDetails(ErrorInfoSchema)[0]?.reason, "PAYLOAD_MISMATCH");
        assert.equal(error.actionId, stored.action!.actionId);
        assert.equal(error.storedFingerprint, stored.action!.fingerprint);
        assert.ok(error.fingerprint && error.fingerprint !== error.storedFingerprint);
      }),
    );
    assert.equal(await gateway.effects("cus_mm"), 1);
  });

  test("verify by ref, get, list pages and typed NotFound / InvalidRequest", async () => {
    const card = chargeCard({ customer: "cus_list", amount: 100, currency: "usd", paymentMethod: "pm_card_visa" });
    const ids = await withRun("ts-run-list", async () => {
      const found: string[] = [];
      for (const s of ["a", "b", "c"]) {
        found.push((await withStep(s, () => client.execute("charge_card", card, { scope: "order:list" }))).action!.actionId);
      }
      const byRef = await withStep("b", () => client.verify({ tool: "charge_card", scope: "order:list" }));
      assert.equal(byRef.action!.actionId, found[1]);
      return found;
    });
    assert.equal((await client.get(ids[0]!)).state, State.CONFIRMED);
    const sizes: number[] = [];
    for await (const page of client.pages({ runId: "ts-run-list", pageSize: 2 })) {
      sizes.push(page.actions.length);
    }
    assert.deepEqual(sizes, [2, 1]);
    const listed: string[] = [];
    for await (const action of client.list({ runId: "ts-run-list", state: State.CONFIRMED })) {
      listed.push(action.actionId);
    }
    assert.deepEqual(listed, ids);
    await assert.rejects(client.get("act_nope"), (e: unknown) => e instanceof NotFound && e.reason === "ACTION_NOT_FOUND");
    await assert.rejects(
      withRun("ts-bad", () => withStep("s", () => client.execute("launch_rockets", card, { scope: "x" }))),
      (e: unknown) => e instanceof InvalidRequest && e.fieldViolations.some((v) => v.field === "tool"),
    );
  });

  test("wait answers when a person decides, and says when the time ran out first", async () => {
    const card = chargeCard({ customer: "cus_wait", amount: 4200, currency: "eur", paymentMethod: "pm_card_visa" });
    const [first, second] = await withRun("ts-run-wait", () =>
      Promise.all(["approve-me", "leave-me"].map((s) => withStep(s, () => client.execute("charge_approved", card, { scope: "order:wait" })))),
    );
    assert.equal(first!.action!.state, State.AWAITING_APPROVAL);
    const idle = await client.wait(second!.action!.actionId, { timeoutMs: 300 });
    assert.equal(idle.reached, false);
    assert.equal(idle.action!.state, State.AWAITING_APPROVAL);
    const waiting = client.wait(first!.action!.actionId, { until: "settled", timeoutMs: 20000 });
    await client.approve(first!.action!.actionId, "ok from the ts test");
    const done = await waiting;
    assert.equal(done.reached, true);
    assert.equal(done.action!.state, State.CONFIRMED);
    await client.deny(second!.action!.actionId, "not this one");
    const denied = await client.wait(second!.action!.actionId);
    assert.deepEqual([denied.reached, denied.action!.state, denied.action!.reason], [true, State.REJECTED, "denied by dev: not this one"]);
    assert.equal(await gateway.effects("cus_wait"), 1);
  });
});
