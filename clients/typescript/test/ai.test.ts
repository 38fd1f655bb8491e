// The Vercel AI SDK (`ai`) with its own mock model against a real gateway: a tool call re-issued
// after a failure, and the same logical action by two parallel steps, are one effect.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { generateText, isStepCount, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { EffectGateClient, chargeCard, effectExecute, effectTool, withRun, withStep } from "../src/index.js";
import { LiveGateway } from "./harness.js";

type Generated = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

function toolCall(toolCallId: string, input: object): Generated {
  return {
    content: [{ type: "tool-call", toolCallId, toolName: "chargeDeposit", input: JSON.stringify(input) }],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage,
    warnings: [],
  } as unknown as Generated;
}

function text(value: string): Generated {
  return {
    content: [{ type: "text", text: value }],
    finishReason: { unified: "stop", raw: "stop" },
    usage,
    warnings: [],
  } as unknown as Generated;
}

describe("effectTool with the AI SDK against a real gateway", () => {
  let gateway: LiveGateway;
  let client: EffectGateClient;

  before(async () => {
    gateway = await LiveGateway.start();
    client = new EffectGateClient({ target: gateway.target });
  });
  after(async () => {
    client.close();
    await gateway.stop();
  });

  const inputSchema = z.object({ customer: z.string(), amountCents: z.number().int() });
  const chargeDeposit = (scope: string) =>
    effectTool({
      client,
      tool: "charge_card",
      description: "Charge the order's deposit.",
      inputSchema,
      payload: ({ customer, amountCents }) => chargeCard({ customer, amount: amountCents, currency: "usd", paymentMethod: "pm_card_visa" }),
      scope,
    });

  test("a tool call re-issued after a failure (a new call id) lands on the same action", async () => {
    // The first generation charges, then the model provider fails; the app retries the whole
    // generation, and the model (re-planning) calls the tool again with a new id.
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        const n = model.doGenerateCalls.length;
        if (n === 1) return toolCall("call_a", { customer: "cus_ai_1", amountCents: 1000 });
        if (n === 2) throw new Error("the model provider went away");
        if (n === 3) return toolCall("call_b", { customer: "cus_ai_1", amountCents: 1000 });
        return text("charged");
      },
    });
    const results: unknown[] = [];
    const attempt = () =>
      generateText({
        model,
        maxRetries: 0,
        tools: { chargeDeposit: tool(chargeDeposit("order:ai-1")) },
        stopWhen: isStepCount(3),
        prompt: "charge the deposit",
        onStepEnd: (step) => {
          results.push(...step.toolResults.map((r) => r.output));
        },
      });
    const answer = await withRun("ts-ai-run-1", async () => {
      await assert.rejects(attempt(), /went away/);
      return attempt();
    });
    assert.equal(answer.text, "charged");
    assert.equal(results.length, 2);
    const [first, second] = results as { actionId: string; replayed: boolean; state: string }[];
    assert.equal(first!.state, "CONFIRMED");
    assert.equal(second!.actionId, first!.actionId);
    assert.equal(second!.replayed, true);
    assert.equal(await gateway.effects("cus_ai_1"), 1);
  });

  test("two parallel steps of one logical action make one effect", async () => {
    const agent = (callId: string) =>
      generateText({
        model: new MockLanguageModelV4({
          doGenerate: [toolCall(callId, { customer: "cus_ai_2", amountCents: 2500 }), text("done")],
        }),
        tools: {
          // The same wrapper written as a plain tool() with effectExecute.
          chargeDeposit: tool({
            description: "Charge the order's deposit.",
            inputSchema,
            execute: effectExecute(
              client,
              "charge_card",
              ({ customer, amountCents }: z.infer<typeof inputSchema>) =>
                chargeCard({ customer, amount: amountCents, currency: "usd", paymentMethod: "pm_card_visa" }),
              { scope: "order:ai-2" },
            ),
          }),
        },
        stopWhen: isStepCount(2),
        prompt: "charge the deposit",
      });
    const answers = await withRun("ts-ai-run-2", () => withStep("charge-deposit", () => Promise.all([agent("call_x"), agent("call_y")])));
    const outputs = answers.flatMap((a) => a.steps.flatMap((s) => s.toolResults.map((r) => r.output as { actionId: string })));
    assert.equal(outputs.length, 2);
    assert.equal(new Set(outputs.map((o) => o.actionId)).size, 1);
    assert.equal(await gateway.effects("cus_ai_2"), 1);
  });
});
