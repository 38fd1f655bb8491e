// One trace from the agent to the provider: with `tracing`, each gRPC call gets a CLIENT span
// under the agent's active OpenTelemetry span and carries its W3C trace context (`traceparent`)
// to the gateway, which continues the trace down to the provider's HTTP call.
// @opentelemetry/api is an optional peer dependency, loaded only when tracing is asked for.
import { createRequire } from "node:module";
import type * as otel from "@opentelemetry/api";
import { ConnectError, type Interceptor } from "@connectrpc/connect";

/** An OpenTelemetry `TracerProvider` (typed loosely so that the client's own types do not need
 * @opentelemetry/api installed). */
export interface TracerProviderLike {
  getTracer(name: string, version?: string): object;
}

const TRACER = "@effectgate/client";

function loadApi(): typeof otel {
  try {
    // The API keeps its state on globalThis, so its CommonJS build sees the SDK an ESM app set up.
    return createRequire(import.meta.url)("@opentelemetry/api") as typeof otel;
  } catch (cause) {
    throw new Error("tracing needs the optional peer dependency @opentelemetry/api: npm install @opentelemetry/api", { cause });
  }
}

const headerSetter: otel.TextMapSetter<Headers> = { set: (headers, key, value) => headers.set(key, value) };

/** The registered propagator when there is one (an SDK set it up); otherwise W3C trace context
 * written here, so the trace still reaches the gateway when only a TracerProvider is set. */
function inject(api: typeof otel, ctx: otel.Context, headers: Headers): void {
  if (api.propagation.fields().length > 0) {
    api.propagation.inject(ctx, headers, headerSetter);
    return;
  }
  const span = api.trace.getSpanContext(ctx);
  if (span === undefined || !api.isSpanContextValid(span)) {
    return;
  }
  const flags = (span.traceFlags & 0xff).toString(16).padStart(2, "0");
  headers.set("traceparent", `00-${span.traceId}-${span.spanId}-${flags}`);
  const state = span.traceState?.serialize();
  if (state) {
    headers.set("tracestate", state);
  }
}

/** A Connect interceptor: a CLIENT span per call (from `provider`, or the global provider) whose
 * context goes to the gateway. With no SDK at all, the active span's context still goes. */
export function tracingInterceptor(provider?: TracerProviderLike, server?: { host: string; port: number }): Interceptor {
  const api = loadApi();
  const tracer = provider ? (provider as otel.TracerProvider).getTracer(TRACER) : api.trace.getTracer(TRACER);
  return (next) => async (req) => {
    const service = req.service.typeName;
    const attributes: otel.Attributes = { "rpc.system": "grpc", "rpc.service": service, "rpc.method": req.method.name };
    if (server) {
      attributes["server.address"] = server.host;
      attributes["server.port"] = server.port;
    }
    const parent = api.context.active();
    const span = tracer.startSpan(`/${service}/${req.method.name}`, { kind: api.SpanKind.CLIENT, attributes }, parent);
    inject(api, api.trace.setSpan(parent, span), req.header);
    try {
      const response = await next(req);
      span.setAttribute("rpc.grpc.status_code", 0);
      return response;
    } catch (thrown) {
      const error = ConnectError.from(thrown);
      span.setAttribute("rpc.grpc.status_code", error.code);
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: error.rawMessage });
      throw thrown;
    } finally {
      span.end();
    }
  };
}
