"""Each sink against its receiver on loopback (Slack: an HTTP receiver; email: the suite's SMTP
simulator, delivering into a Maildir), the kinds that are not approvals (UNKNOWN parked once,
limit denials, breaker openings), the config's errors, and SIGHUP's reload of the sinks."""

from __future__ import annotations

import email
import mailbox
import time
from email.message import EmailMessage
from email.policy import default
from pathlib import Path
from typing import Any

import httpx
import pytest

from effectgate.adapters.base import AmbiguousError, NoEffectError, Observation
from effectgate.client import EffectGateError, RunContext, State
from effectgate.gateway.background.notify import build_sinks
from effectgate.gateway.config import ConfigError, parse_config
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.smtp_sim import MaildirDrop, SmtpSimulator
from tests.harness import start_gateway
from tests.notify_kit import SECRET, Receiver, until, until_async, webhook_sink
from tests.test_webhook_listener import listener_doc

CARD = ChargeCard(customer="cus_ines", amount=125000, currency="jpy", payment_method="pm_hidden", description="Rent")


def slack_sink(**extra: Any) -> dict[str, Any]:
    return {"name": "ops-slack", "kind": "slack", "url_env": "EG_SLACK_URL", "console_url": "https://c.test", **extra}


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EG_NOTIFY_SECRET", SECRET)


def kit(adapter: ScriptedAdapter, sinks: list[dict[str, Any]], **tool: Any) -> Any:
    return gateway(
        adapters={"payments": adapter},
        tools={"charge_card": {"adapter": "payments", **tool}},
        store="sqlite",
        settings={"notify_interval": "0.1s"},
        tables={"notify": sinks},
    )


async def test_slack_gets_the_waiting_approval_in_words_and_money(monkeypatch: pytest.MonkeyPatch) -> None:
    slack = await Receiver().start()
    monkeypatch.setenv("EG_SLACK_URL", slack.url)
    try:
        async with kit(ScriptedAdapter(time.time), [slack_sink()], approval="required") as gw:
            answer = await gw.client.execute("charge_card", CARD, scope="o:1", context=RunContext("run-s", "pay"))
            await slack.until(lambda got: len(got) >= 1, "the Slack message")
        message = slack.received[0].json
        assert message["text"].startswith("charge_card: waits for approval: ¥125,000 to cus_ines (Rent)")
        assert f"https://c.test/actions/{answer.action.action_id}" in message["text"]
        assert message["blocks"][0]["type"] == "section"
        assert b"pm_hidden" not in slack.received[0].body
    finally:
        await slack.stop()


async def test_email_goes_through_the_smtp_server_once_per_event(tmp_path: Path) -> None:
    smtp = SmtpSimulator(maildir=MaildirDrop(tmp_path / "mail"))
    await smtp.start()
    sink = {
        "name": "ops-mail",
        "kind": "email",
        "host": "127.0.0.1",
        "port": smtp.port,
        "from_address": "effectgate@example.test",
        "to": ["oncall@example.test"],
        "console_url": "https://c.test",
        "events": ["approval_waiting", "approval_decided"],
    }
    try:
        async with kit(ScriptedAdapter(time.time), [sink], approval="required") as gw:
            answer = await gw.client.execute("charge_card", CARD, scope="o:2", context=RunContext("run-e", "pay"))
            await gw.client.deny(answer.action.action_id, note="not this month")
            await until(lambda: smtp.effects() >= 2, "two letters")
        parsed = [email.message_from_bytes(m.as_bytes(), policy=default) for m in mailbox.Maildir(tmp_path / "mail")]
        letters = sorted(
            (m for m in parsed if isinstance(m, EmailMessage)), key=lambda m: "decided" in str(m["Subject"])
        )
        assert [str(m["Subject"]) for m in letters] == [
            "[effectgate] charge_card: waits for approval: ¥125,000 to cus_ines (Rent)",
            "[effectgate] charge_card: approval decided (denied): ¥125,000 to cus_ines (Rent)",
        ]
        body = letters[1].get_content()
        assert "Note: not this month" in body and f"https://c.test/actions/{answer.action.action_id}" in body
        assert "pm_hidden" not in body and "pm_hidden" not in letters[0].get_content()
        assert all(str(m["Message-ID"]).strip().startswith("<evt_") for m in letters)  # the receiver's dedup key
    finally:
        await smtp.stop()


async def test_unknown_parked_is_told_once_not_at_every_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    slack = await Receiver().start()
    monkeypatch.setenv("EG_SLACK_URL", slack.url)
    adapter = ScriptedAdapter(time.time, consistency_window=0.0, dedups_on_key=False)
    adapter.script_execute(AmbiguousError("timed out"))
    adapter.script_verify(*[Observation.unknown("the read API is down")] * 50)
    try:
        async with kit(adapter, [slack_sink(events=["unknown_parked"])], max_attempts=1) as gw:
            answer = await gw.client.execute("charge_card", CARD, scope="o:3", context=RunContext("run-u", "pay"))
            assert answer.action.state == State.UNKNOWN

            async def rechecked() -> bool:
                story = await gw.store.history(answer.action.action_id)
                return sum(1 for e in story if e.state.value == "UNKNOWN") >= 3

            await until_async(rechecked, "two re-checks that stay UNKNOWN")
            await slack.until(lambda got: len(got) >= 1, "the parked notification")
            await until_async(lambda: _empty(gw), "the outbox to empty")
        assert len(slack.received) == 1 and "outcome unknown" in slack.received[0].json["text"]
    finally:
        await slack.stop()


async def _empty(gw: Any) -> bool:
    rows: list[Any] = await gw.store.notify_rows(None, 10)
    return rows == []


async def test_a_limit_denial_and_a_breaker_opening_are_notices() -> None:
    hook = await Receiver().start()
    adapter = ScriptedAdapter(time.time, consistency_window=0.0)
    tools = {
        "charge_card": {"adapter": "payments", "limits": {"max_effects": 1, "window": "1h"}},
        "refund": {"adapter": "payments", "breaker": {"failures": 1, "cooldown": "1h"}},
    }
    sinks = [webhook_sink(hook.url, events=["limit_denied", "breaker_opened"])]
    try:
        async with gateway(
            adapters={"payments": adapter},
            tools=tools,
            store="sqlite",
            settings={"notify_interval": "0.1s"},
            tables={"notify": sinks},
        ) as gw:
            await gw.client.execute("charge_card", CARD, scope="o:4", context=RunContext("run-l", "pay"))
            for _ in range(2):  # an agent retrying a denied call is one notice: while it is queued,
                with pytest.raises(EffectGateError):
                    await gw.client.execute("charge_card", CARD, scope="o:5", context=RunContext("run-l", "pay2"))
            await hook.until(lambda got: len(got) >= 1, "the denial")
            await until_async(lambda: _empty(gw), "the denial to leave the outbox")
            with pytest.raises(EffectGateError):  # and once it was delivered (its outbox row gone)
                await gw.client.execute("charge_card", CARD, scope="o:5", context=RunContext("run-l", "pay2"))
            adapter.script_execute(NoEffectError("503 from the provider"))
            await gw.client.execute("refund", CARD, scope="o:6", context=RunContext("run-b", "pay"))
            await hook.until(lambda got: any(r.json["type"] == "breaker_opened" for r in got), "the breaker")
            await until_async(lambda: _empty(gw), "the outbox to empty")
        kinds = [r.json["type"] for r in hook.received]
        assert kinds.count("limit_denied") == 1 and kinds.count("breaker_opened") == 1
        denial = next(r.json["data"] for r in hook.received if r.json["type"] == "limit_denied")
        assert denial["reason"] == "RATE_LIMITED" and denial["money"]["text"] == "¥125,000"
        assert denial["link"].startswith("https://console.example.test/actions/act_")
        opened = next(r.json["data"] for r in hook.received if r.json["type"] == "breaker_opened")
        assert opened["tool"] == "refund" and "1 provider errors" in opened["why"]
    finally:
        await hook.stop()


def test_config_errors_name_the_sink_and_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"adapters": {"payments": {}}, "tools": {"charge_card": {"adapter": "payments"}}}
    hook: dict[str, Any] = {
        "name": "h",
        "kind": "webhook",
        "console_url": "https://c",
        "url": "http://x",
        "secret_env": "S",
    }
    cases = [
        ({**hook, "host": "smtp"}, "[[notify]] #1 (h) host: only for kind = 'email' (this sink is 'webhook')"),
        ({**hook, "secret_env": None}, "[[notify]] #1 (h) secret_env or secret_file: required for kind = 'webhook'"),
        ({**hook, "tools": ["charge_crd"]}, "tools: 'charge_crd' is not a [tools.*] table (did you mean charge_card?)"),
        ({**hook, "evnts": []}, "[[notify]] #1 (h) evnts: unknown key (did you mean events?)"),
    ]
    for sink, expected in cases:
        doc = {**base, "notify": [{k: v for k, v in sink.items() if v is not None}]}
        with pytest.raises(ConfigError) as caught:
            parse_config(doc)
        assert expected in str(caught.value)
    monkeypatch.delenv("S", raising=False)
    config = parse_config({**base, "notify": [hook]})
    with pytest.raises(ConfigError, match=r"\[\[notify\]\] #1 \(h\) secret_env: environment variable S is not set"):
        build_sinks(config.notify)


async def test_sighup_reload_moves_the_sinks(tmp_path: Path) -> None:
    first, second = await Receiver().start(), await Receiver().start()
    try:
        async with kit(ScriptedAdapter(time.time), [webhook_sink(first.url)], approval="required") as gw:
            await gw.client.execute("charge_card", CARD, scope="o:7", context=RunContext("run-r", "a"))
            await first.until(lambda got: len(got) >= 1, "the first sink's notification")
            doc = {
                "adapters": {"payments": {}},
                "tools": {"charge_card": {"adapter": "payments", "approval": "required"}},
                "notify": [webhook_sink(second.url)],
            }
            assert await gw.server.reload(str(write_config(doc, tmp_path / "effectgate.toml")))
            await gw.client.execute("charge_card", CARD, scope="o:8", context=RunContext("run-r", "b"))
            await second.until(lambda got: len(got) >= 1, "the reloaded sink's notification")
        assert len(first.received) == 1 and len(second.received) == 1
    finally:
        await first.stop()
        await second.stop()


async def test_webhook_forgeries_over_the_threshold_are_one_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = await Receiver().start()
    doc = listener_doc(tmp_path, monkeypatch)
    doc["gateway"]["notify_interval"] = "0.1s"
    doc["notify"] = [webhook_sink(hook.url, events=["webhook_forgeries"], forgeries=3, forgery_window="1m")]
    live = await start_gateway(doc)
    try:
        url = f"http://127.0.0.1:{live.gateway.webhook_port}/webhooks/stripe"
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(5):  # unsigned: refused as forged; the third crosses the threshold
                answer = await client.post(url, content=b"{}", headers={"Content-Type": "application/json"})
                assert answer.json() == {"error": "forged"}
        await hook.until(lambda got: len(got) >= 1, "the forgeries notice")
        await until_async(lambda: _empty(live.gateway), "the outbox to empty")
    finally:
        await live.close()
        await hook.stop()
    assert len(hook.received) == 1  # once per window, not once per forgery past the threshold
    notice = hook.received[0].json
    assert notice["type"] == "webhook_forgeries"
    assert notice["data"]["adapter"] == "stripe" and notice["data"]["refused"] == 3
    assert notice["data"]["link"] == "https://console.example.test/inbox"
