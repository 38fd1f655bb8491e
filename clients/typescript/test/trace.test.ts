// One trace from the agent to the provider, checked at a real OTLP/HTTP receiver: the agent's span
// (its own OpenTelemetry SDK, exporting OTLP over HTTP), the client's CLIENT span (`tracing: true`),
// the gateway's server span and the provider's HTTP span share one trace id, each under the last.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { SimpleSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { EffectGateClient, EffectState, chargeCard } from "../src/index.js";
import { LiveGateway, OtlpReceiver, type ReceivedSpan } from "./harness.js";

const EXECUTE = "/effectgate.v1.EffectGateway/Execute";

/** agent -> client -> gateway server -> effectgate.provider.execute -> provider HTTP CLIENT span,
 * or undefined until all of them have arrived. */
function chain(spans: ReceivedSpan[], traceId: string): ReceivedSpan[] | undefined {
  const inTrace = spans.filter((s) => s.traceId === traceId);
  const child = (parent: ReceivedSpan | undefined, match: (s: ReceivedSpan) => boolean) =>
    parent && inTrace.find((s) => s.parentSpanId === parent.spanId && match(s));
  const agent = inTrace.find((s) => s.name === "agent.charge_deposit" && s.parentSpanId === "");
  const client = child(agent, (s) => s.name === EXECUTE && s.kind === "SPAN_KIND_CLIENT");
  const server = child(client, (s) => s.name === EXECUTE && s.kind === "SPAN_KIND_SERVER");
  const provider = inTrace.find((s) => s.name === "effectgate.provider.execute");
  const http = child(provider, (s) => s.kind === "SPAN_KIND_CLIENT");
  return agent && client && server && provider && http ? [agent, client, server, http] : undefined;
}

async function waitForChain(receiver: OtlpReceiver, traceId: string): Promise<ReceivedSpan[]> {
  const deadline = Date.now() + 60000;
  for (;;) {
    const found = chain(await receiver.spans(), traceId);
    if (found) {
      return found;
    }
    if (Date.now() > deadline) {
      assert.fail(`no agent -> client -> gateway -> provider chain in trace ${traceId}:\n${JSON.stringify(await receiver.spans(), null, 1)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("tracing joins the agent's trace", () => {
  let receiver: OtlpReceiver;
  let gateway: LiveGateway;

  before(async () => {
    receiver = await OtlpReceiver.start();
    gateway = await LiveGateway.start({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
        OTEL_SERVICE_NAME: "effectgate",
        OTEL_BSP_SCHEDULE_DELAY: "100",
      },
    });
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  });
  after(async () => {
    context.disable();
    await gateway.stop(); // SIGTERM: the gateway flushes its spans first
    await receiver.stop();
  });

  const agentProvider = () =>
    new TracerProvider({
      resource: resourceFromAttributes({ "service.name": "agent" }),
      spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${receiver.endpoint}/v1/traces` }) })],
    });

  /** One charge under the agent's span; the trace id of that span. */
  async function chargeUnderAgentSpan(provider: TracerProvider, tracing: true | TracerProvider, customer: string): Promise<string> {
    const client = new EffectGateClient({ target: gateway.target, tracing });
    try {
      return await provider.getTracer("agent").startActiveSpan("agent.charge_deposit", async (span) => {
        try {
          const card = chargeCard({ customer, amount: 1000, currency: "usd", paymentMethod: "pm_card_visa" });
          const answer = await client.execute("charge_card", card, {
            scope: `order:${customer}`,
            context: { runId: `run-${customer}`, stepId: "charge", parentRunId: "", agent: "" },
          });
          assert.equal(answer.action?.state, EffectState.CONFIRMED);
          return span.spanContext().traceId;
        } finally {
          span.end();
        }
      });
    } finally {
      client.close();
    }
  }

  /** One charge under the agent's span: one effect, and agent -> client -> gateway spans in one trace. */
  async function chargeOnceInOneTrace(provider: TracerProvider, tracing: true | TracerProvider, customer: string): Promise<void> {
    const traceId = await chargeUnderAgentSpan(provider, tracing, customer);
    await provider.forceFlush();
    assert.equal(await gateway.effects(customer), 1);
    const found = await waitForChain(receiver, traceId);
    assert.deepEqual(
      found.map((s) => s.service),
      ["agent", "agent", "effectgate", "effectgate"],
    );
  }

  test("tracing: true with a global SDK (provider and W3C propagator registered)", async () => {
    const provider = agentProvider();
    trace.setGlobalTracerProvider(provider);
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    try {
      await chargeOnceInOneTrace(provider, true, "cus_ts_trace_1");
    } finally {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
    }
  });

  test("tracing: a TracerProvider, nothing registered globally (traceparent written by the client)", async () => {
    const provider = agentProvider();
    try {
      await chargeOnceInOneTrace(provider, provider, "cus_ts_trace_2");
    } finally {
      await provider.shutdown();
    }
  });
});
