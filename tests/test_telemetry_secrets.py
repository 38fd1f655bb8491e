"""Markers planted in payloads and provider secrets appear in no span, metric or log line, even
with every HTTP header captured; and the pieces that make that so, one by one."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from google.protobuf import any_pb2, struct_pb2
from opentelemetry import trace

from effectgate.gateway.config import ConfigError, load_config, parse_config
from effectgate.gateway.config.telemetry import TelemetryConfig
from effectgate.gateway.observability import telemetry_sdk
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.adapter_targets import scenario
from tests.harness import API_KEY, API_KEY_ENV, WRONG_KEY_ENV, config_doc, stripe_tools, stripe_tools_with_a_refused_key
from tests.otlp_receiver import ChildGateway, OtlpReceiver, attrs, wait_for
from tests.test_execute import request
from tests.test_telemetry import client_traceparent, execute, otel_env

PAYLOAD_MARKER = "zq7payloadmarker"
WRONG_KEY = "sk_test_wrongkey_marker_8d2e41"
CRM_KEY = "crm_secret_marker_51c7e0"
CAPTURE_ALL = {
    f"OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_{side}": ".*"
    for side in ("CLIENT_REQUEST", "CLIENT_RESPONSE", "SERVER_REQUEST", "SERVER_RESPONSE")
}


def marked(method: str = "pm_card_visa") -> ChargeCard:
    return ChargeCard(
        customer=f"cus_{PAYLOAD_MARKER}",
        amount=4242,
        currency="usd",
        payment_method=method,
        description=f"order {PAYLOAD_MARKER}",
    )


async def test_no_payload_or_secret_leaves_through_telemetry(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key=API_KEY, search_lag=0.3)
    await receiver.start()
    await sim.start()
    # A second adapter holding a key the provider refuses: its 401 echoes the (masked) key.
    tools = stripe_tools_with_a_refused_key(sim.base_url, max_attempts=2)
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **tools)
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
    env = {**otel_env(receiver.endpoint), **CAPTURE_ALL, API_KEY_ENV: API_KEY, WRONG_KEY_ENV: WRONG_KEY}
    gateway = ChildGateway(doc, tmp_path, env, log_level="DEBUG")
    try:
        target = await gateway.ready()
        port = await gateway.metrics_port()
        ok = await execute(target, request(step="ok", payload=marked()), client_traceparent()[0])
        assert ok.action.state == pb.EFFECT_STATE_CONFIRMED
        sim.injector.script(["drop_after_commit"])
        lost = await execute(target, request(step="lost", payload=marked()), client_traceparent()[0])
        assert lost.action.state == pb.EFFECT_STATE_CONFIRMED  # verified by read-back
        declined = request(step="declined", payload=marked("pm_card_chargeDeclined"))
        assert (await execute(target, declined, client_traceparent()[0])).action.state == pb.EFFECT_STATE_REJECTED
        wrong = request(step="wrong", payload=marked())
        wrong.tool = "charge_wrong"
        refused = await execute(target, wrong, client_traceparent()[0])
        assert refused.action.state != pb.EFFECT_STATE_CONFIRMED

        def captured() -> list[dict[str, object]] | None:
            found = [
                attrs(s.attributes)
                for s in receiver.spans
                if "http.request.header.authorization" in attrs(s.attributes)
            ]
            return found if len(found) >= 5 else None

        headers = await wait_for(captured, "client spans with captured headers")
        # Capture is on (so this test could catch a leak), and credentials are redacted.
        assert all(h["http.request.header.authorization"] == ["[REDACTED]"] for h in headers)
        assert any(h.get("http.request.header.idempotency_key") == ["[REDACTED]"] for h in headers)
        assert any("http.request.header.user_agent" in h and "http.response.header.request_id" in h for h in headers)
        async with httpx.AsyncClient(timeout=10) as client:
            prometheus = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        assert "effectgate_actions_total" in prometheus
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.stop()
    logs = "".join(gateway.output)
    assert '"event":"action_settled"' in logs and "DEBUG" in logs
    for where, text in (("telemetry", receiver.dump()), ("prometheus", prometheus), ("logs", logs)):
        for secret in (PAYLOAD_MARKER, API_KEY, API_KEY[-8:], WRONG_KEY, WRONG_KEY[-8:]):
            assert secret not in text, f"{secret!r} leaked into {where}"


# -- the parts -----------------------------------------------------------------------------------


def test_urls_are_recorded_without_query_values_or_as_the_adapters_template() -> None:
    url = httpx.URL("http://127.0.0.1:9/v1/payment_intents/search?query=metadata%5B%27a%27%5D&limit=100")
    assert telemetry_sdk.safe_url(url, None) == "http://127.0.0.1:9/v1/payment_intents/search?query={}&limit={}"
    filled = httpx.URL(f"http://crm:8080/api/v2/customers/{PAYLOAD_MARKER}/activate?by={PAYLOAD_MARKER}")
    template = {telemetry_sdk.URL_TEMPLATE: "/customers/{id}/activate?by={email}"}
    assert telemetry_sdk.safe_url(filled, template) == "http://crm:8080/api/v2/customers/{id}/activate?by={email}"
    assert telemetry_sdk.safe_url(filled, {telemetry_sdk.URL_TEMPLATE: "https://x/{id}"}) == "https://x/{id}"


def test_header_redaction_covers_credentials_whatever_the_environment_says() -> None:
    names = telemetry_sdk.redaction_list(
        {"crm": {"auth_header": "X-Tenant-Pass"}}, {telemetry_sdk.SANITIZE_ENV: "x-mine"}
    ).split(",")
    assert names[0] == "x-mine" and "X-Tenant-Pass" in names
    assert {"auth", "token", "key", "secret", "cookie"} <= set(names)


def test_no_exporter_configured_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    installed = telemetry_sdk.setup(TelemetryConfig())
    assert not installed.enabled
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry_sdk.setup(TelemetryConfig(otlp_endpoint="http://127.0.0.1:9")).enabled


def test_the_telemetry_section_is_validated() -> None:
    deploy = load_config(Path(__file__).resolve().parent.parent / "deploy" / "effectgate.toml")
    assert deploy.telemetry.prometheus_address == ("0.0.0.0", 9464)
    base = config_doc("sqlite:///x.db", **stripe_tools("http://127.0.0.1:9"))
    config = parse_config({**base, "telemetry": {"prometheus_listen": "127.0.0.1:9464", "backlog_interval": "500ms"}})
    assert config.telemetry.prometheus_address == ("127.0.0.1", 9464) and config.telemetry.backlog_interval == 0.5
    for bad, where in (
        ({"prometheus_port": 1}, r"\[telemetry\] prometheus_port"),
        ({"sample_ratio": 2}, r"\[telemetry\] sample_ratio"),
        ({"prometheus_listen": "nowhere"}, r"\[telemetry\] prometheus_listen"),
        ({"backlog_interval": "soon"}, r"\[telemetry\] backlog_interval"),
    ):
        with pytest.raises(ConfigError, match=where):
            parse_config({**base, "telemetry": bad})


async def test_the_http_adapters_urls_are_recorded_as_their_template(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), CrmSimulator(api_key=CRM_KEY)
    await receiver.start()
    await sim.start()
    adapter = {**scenario("crm_activate"), "base_url": sim.base_url, "token_env": "EG_TEST_CRM_KEY"}
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        adapters={"crm_activate": adapter},
        tools={"activate_customer": {"adapter": "crm_activate", "attempt_timeout": "2s"}},
    )
    env = {**otel_env(receiver.endpoint), **CAPTURE_ALL, "EG_TEST_CRM_KEY": CRM_KEY}
    gateway = ChildGateway(doc, tmp_path, env)
    try:
        target = await gateway.ready()
        customer = f"cus_{PAYLOAD_MARKER}"
        packed = any_pb2.Any()
        packed.Pack(struct_pb2.Struct(fields={"customer": struct_pb2.Value(string_value=customer)}))
        req = pb.ExecuteRequest(
            context=pb.RunContext(run_id="run-crm", step_id="activate"),
            tool="activate_customer",
            scope=f"customer:{customer}",
            payload=packed,
        )
        answer = await execute(target, req, client_traceparent()[0])
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED

        def client_spans() -> list[dict[str, object]] | None:
            found = [attrs(s.attributes) for s in receiver.spans if s.kind == s.SPAN_KIND_CLIENT]
            return found or None

        (http,) = await wait_for(client_spans, "the CRM call's client span")
        url = http.get("url.full", http.get("http.url"))
        assert url == f"{sim.base_url}/customers/{{customer}}/activate"
        assert http["http.request.header.authorization"] == ["[REDACTED]"]
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.stop()
    for text in (receiver.dump(), "".join(gateway.output)):
        assert PAYLOAD_MARKER not in text and CRM_KEY not in text
