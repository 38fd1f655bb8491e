"""The operator CLI as people and scripts use it, against a real `effectgate serve` on a Stripe
simulator: every command with `-o json` (parsed here), YAML, the table's header and order,
`--since`, `--limit 0`, `--watch` (on WatchActions), case-insensitive states, options after the
command's name, `--version` and the exit codes; `deny`, `describe` (the masked payload and the
history), a bound `approve`, `limits` (figures matched with the simulator's sums) and
`grant-limit` (one refused charge through, once)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.client.cli import render
from effectgate.gateway.runtime import cli as gateway_cli
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway
from tests.test_execute import details, request

# A watch prints within its --interval; the bound is for a loaded machine, where a CLI
# process takes seconds to start and each poll waits for the CPU.
WATCH_WAIT = 90
TOKEN = "operator-cli-secret"
PRINCIPALS = [
    {
        "name": "alice",
        "tenant": "acme",
        "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "roles": ["operator", "agent"],
    }
]
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def _env(target: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")} | {"EFFECTGATE_TOKEN": TOKEN}
    env["LC_ALL"] = "C.UTF-8"  # money in the tables is written in the terminal's locale (C: as en_US)
    if target:
        env["EFFECTGATE_TARGET"] = target
    return env


async def process_cli(*args: str, target: str = "", check: int | None = 0) -> tuple[int, str, str]:
    """`effectgate ARGS` as a process of its own: its exit status as a shell sees it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(target),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    code = int(proc.returncode or 0)
    if check is not None:
        assert code == check, f"{args}: exit {code}\n{err.decode()}"
    return code, out.decode(), err.decode()


def _read_by_the_cli(key: str) -> bool:
    """The variables `_env` sets, which an in-process command gets as its own."""
    return key.startswith("EFFECTGATE_") or key == "LC_ALL"


def _in_process(args: tuple[str, ...], env: dict[str, str]) -> tuple[int, str, str]:
    """The `effectgate` command's `main(argv)` in this process, with the environment, stdout and
    stderr a process would have; the root logger's handlers (which setup_logging replaces), the
    environment and the cached terminal locale are put back after."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    saved = {k: v for k, v in os.environ.items() if _read_by_the_cli(k)}
    for key in saved:
        del os.environ[key]
    os.environ.update({k: v for k, v in env.items() if _read_by_the_cli(k)})
    render.reader.cache_clear()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = gateway_cli.main(list(args))
            except SystemExit as exc:  # argparse: --version, usage errors
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    finally:
        for key in [k for k in os.environ if _read_by_the_cli(k)]:
            del os.environ[key]
        os.environ.update(saved)
        render.reader.cache_clear()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    return code, out.getvalue(), err.getvalue()


_ONE_AT_A_TIME = threading.Lock()  # stdout, stderr and the environment are the process's


async def cli(*args: str, target: str = "", check: int | None = 0) -> tuple[int, str, str]:
    """`effectgate ARGS`, run in this process (on a thread: the command runs its own event loop);
    what it prints and the exit code its `main` returns. The tests of the process itself (exit
    statuses, Ctrl-C) use `process_cli`."""

    def run() -> tuple[int, str, str]:
        with _ONE_AT_A_TIME:
            return _in_process(args, _env(target))

    code, out, err = await asyncio.wait_for(asyncio.to_thread(run), 60)
    if check is not None:
        assert code == check, f"{args}: exit {code}\n{err}"
    return code, out, err


async def as_json(*args: str, target: str) -> Any:
    _, out, _ = await cli(*args, "-o", "json", target=target)
    return json.loads(out)


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    # Search lags a minute: an answer dropped after the commit leaves its action UNKNOWN.
    simulator = StripeSimulator(api_key=API_KEY, search_lag=60.0)
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture
async def served(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[tuple[ChildGateway, str]]:
    tools = stripe_tools(sim.base_url, max_attempts=1, consistency_window="60s", deadline="1s", attempt_timeout="0.8s")
    tools["tools"]["charge_approved"] = {**tools["tools"]["charge_card"], "approval": "required", "bypass": "operator"}
    # Two charges of 10.00 a window (tests/test_execute.CHARGE is 1000 usd).
    tools["tools"]["charge_limited"] = {**tools["tools"]["charge_card"], "limits": {"budget": {"usd": 2000}}}
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=PRINCIPALS, **tools)
    # The global options after the command's name.
    gateway = ChildGateway(doc, tmp_path, {}, log_format="json", options_last=True)
    try:
        yield gateway, await gateway.ready()
    finally:
        await gateway.terminate()


async def execute(target: str, step: str, tool: str = "charge_card", scope: str = "order:1") -> pb.Action:
    message = request(step=step, scope=scope)
    message.tool = tool
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gateway_pb2_grpc.EffectGatewayStub(channel)
        # The tools' 1 s deadline can pass before a loaded machine settles the call: ABORTED
        # (in flight), and the agent calls again with the same run context, as documented.
        for _ in range(20):
            try:
                return (await stub.Execute(message, metadata=AUTH, timeout=30)).action
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.ABORTED or details(exc)["ErrorInfo"].reason != "IN_FLIGHT":
                    raise
                await asyncio.sleep(0.2)
    raise AssertionError(f"{step}: still in flight after 20 calls")


async def test_every_command_answers_json_a_script_can_read(
    served: tuple[ChildGateway, str], sim: StripeSimulator
) -> None:
    gateway, target = served
    assert any(line.startswith("{") for line in gateway.output)  # `serve ... --log-format json` was taken
    confirmed = [await execute(target, f"s{n}") for n in range(3)]
    assert all(a.state == pb.EFFECT_STATE_CONFIRMED for a in confirmed)
    waiting = await execute(target, "wait", tool="charge_approved", scope="order:2")
    assert waiting.state == pb.EFFECT_STATE_AWAITING_APPROVAL
    sim.injector.script(["drop_after_commit"])
    lost = await execute(target, "lost", scope="order:3")
    assert lost.state == pb.EFFECT_STATE_UNKNOWN
    lost_charge = sim.ledger[-1]["id"]

    # actions: newest first, short state names, every field present.
    rows = await as_json("actions", target=target)
    ids = [r["action_id"] for r in rows]
    assert ids == [lost.action_id, waiting.action_id, *(a.action_id for a in reversed(confirmed))]
    assert [r["state"] for r in rows] == ["UNKNOWN", "AWAITING_APPROVAL", "CONFIRMED", "CONFIRMED", "CONFIRMED"]
    assert rows[1]["next_step"] == "APPROVE" and rows[1]["context"]["step_id"] == "wait"
    assert {"action_id", "tenant", "tool", "scope", "fingerprint", "attempts", "reason", "notes"} <= set(rows[2])
    assert rows[2]["receipt"]["external_id"] == sim.ledger[2]["id"] and rows[2]["generation"] == 0
    assert [r["created_at"] for r in rows] == sorted((r["created_at"] for r in rows), reverse=True)
    # Filters: states in any case, the newest N, all of them a page of one at a time, --since.
    assert [r["action_id"] for r in await as_json("actions", "--state", "awaiting_approval", target=target)] == [
        waiting.action_id
    ]
    assert [r["action_id"] for r in await as_json("actions", "--limit", "2", target=target)] == ids[:2]
    assert [r["action_id"] for r in await as_json("actions", "--limit", "0", "--chunk-size", "1", target=target)] == ids
    assert len(await as_json("actions", "--since", "1h", target=target)) == 5
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert await as_json("actions", "--since", future, target=target) == []
    assert len(await as_json("actions", "--since", "2000-01-01T00:00:00Z", "--tool", "charge_card", target=target)) == 4

    # The same as YAML and as a table with a header row.
    _, out, _ = await cli("actions", "-o", "yaml", target=target)
    assert [r["action_id"] for r in yaml.safe_load(out)] == ids
    _, out, _ = await cli("actions", target=target)
    lines = out.splitlines()
    assert lines[0].split() == ["ACTION", "STATE", "TOOL", "AMOUNT", "TO", "SCOPE", "RUN", "AGE", "RECEIPT", "REASON"]
    assert [line.split()[0] for line in lines[1:]] == ids and "EFFECT_STATE_" not in out
    # 1000 usd is money: $10.00 to cus_42 (in the terminal's locale: tests/test_money.py has others).
    assert all(line.split()[3:5] == ["$10.00", "cus_42"] for line in lines[1:])
    _, out, _ = await cli("actions", "-o", "wide", "--state", "Confirmed", target=target)
    head = ["ACTION", "STATE", "TOOL", "AMOUNT", "TO", "SCOPE", "RUN", "STEP", "AGENT", "ATTEMPTS"]
    assert out.splitlines()[0].split()[:10] == head

    # show / describe: every field, as a description or a document.
    shown = await as_json("show", waiting.action_id, target=target)
    assert shown["action_id"] == waiting.action_id and shown["state"] == "AWAITING_APPROVAL"
    _, out, _ = await cli("show", waiting.action_id, target=target)
    labels = [line.split(":")[0].strip() for line in out.splitlines()]
    assert {"Action", "State", "Next step", "Scope", "Run", "Step", "Fingerprint", "Created"} <= set(labels)
    described = await as_json("describe", waiting.action_id, target=target)
    assert described["action"] == shown
    _, out, _ = await cli("describe", confirmed[0].action_id, "-o", "yaml", target=target)
    assert yaml.safe_load(out)["action"]["receipt"]["external_id"] == sim.ledger[0]["id"]
    _, out, _ = await cli("describe", confirmed[0].action_id, target=target)
    assert "Receipt:" in out and sim.ledger[0]["id"] in out

    # approve, then verify once the reconciler sent it: the read-back's observation is in the JSON.
    approved = await as_json("approve", waiting.action_id, "--note", "checked the order", target=target)
    assert approved["action_id"] == waiting.action_id and approved["state"] in ("PLANNED", "DISPATCHED", "CONFIRMED")
    for _ in range(150):
        if (await as_json("show", waiting.action_id, target=target))["state"] == "CONFIRMED":
            break
        await asyncio.sleep(0.2)
    verified = await as_json("verify", waiting.action_id, target=target)
    assert verified["action"]["state"] == "CONFIRMED"
    assert verified["observation"]["outcome"] == "CONFIRMED" and verified["observation"]["at"]
    _, out, _ = await cli("verify", waiting.action_id, target=target)
    assert "Read back now:" in out and "CONFIRMED" in out
    granted = await as_json("grant-bypass", waiting.action_id, "--note", "second charge asked", target=target)
    assert any("bypass granted by alice" in n for n in granted["notes"])
    settled = await as_json(
        "reconcile", lost.action_id, "--resolution", "confirmed", "--note", "seen", "--external-id", lost_charge,
        target=target,
    )  # fmt: skip
    assert settled["state"] == "CONFIRMED" and settled["receipt"]["external_id"] == lost_charge

    # Exit codes, as a shell sees them: the gateway refused (1), usage (2), no such action (3).
    _, _, err = await process_cli(
        "reconcile", lost.action_id, "--resolution", "REJECTED", "--note", "n", "--target", target, check=1
    )
    assert "FAILED_PRECONDITION" in err
    await process_cli("show", "act_missing", "-o", "json", "--target", target, check=3)
    _, _, err = await process_cli("actions", "--state", "bogus", "--target", target, check=2)
    assert "--help" in err and "usage:" not in err
    for bad in (["--state", "bogus"], ["--since", "yesterday"], ["--since", "2026-01-01T00:00:00"], ["--limit", "-1"]):
        _, _, err = await cli("actions", *bad, "--target", target, check=2)
        assert "--help" in err and "usage:" not in err  # one line and where the usage is
    # The gateway's own options after an operator command's name.
    _, out, _ = await cli("actions", "-o", "json", "--log-level", "DEBUG", "--target", target)
    assert len(json.loads(out)) == 5


async def test_deny_describe_and_a_bound_approval(served: tuple[ChildGateway, str], sim: StripeSimulator) -> None:
    _, target = served
    doomed = await execute(target, "d1", tool="charge_approved", scope="order:d1")
    denied = await as_json("deny", doomed.action_id, "--note", "not this customer", target=target)
    assert denied["state"] == "REJECTED" and "not this customer" in denied["reason"]
    assert (await execute(target, "d1", tool="charge_approved", scope="order:d1")).state == pb.EFFECT_STATE_REJECTED
    _, _, err = await cli("deny", doomed.action_id, "--note", "again", "--target", target, check=1)
    assert "NOT_AWAITING_APPROVAL" in err

    waiting = await execute(target, "a1", tool="charge_approved", scope="order:a1")
    described = await as_json("describe", waiting.action_id, target=target)
    # The masked payload, and what an approval binds to.
    assert described["payload"] == {
        "customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "***"
    }  # fmt: skip
    assert described["action"]["payload"] == described["payload"]
    fingerprint, version = described["action"]["fingerprint"], described["action"]["policy_version"]
    assert fingerprint and version and described["action"]["approvals_required"] == 1
    assert [e["kind"] for e in described["history"]] == ["claim"]
    assert described["history"][0]["state"] == "AWAITING_APPROVAL" and described["history"][0]["seq"] > 0
    # A stale screen is refused; what was shown is approved.
    _, _, err = await cli(
        "approve", waiting.action_id, "--note", "ok", "--fingerprint", "f" * 64, "--target", target, check=1
    )
    assert "APPROVAL_STALE" in err
    approved = await as_json(
        "approve", waiting.action_id, "--note", "checked", "--fingerprint", fingerprint, "--policy-version", version,
        target=target,
    )  # fmt: skip
    assert approved["state"] in ("PLANNED", "DISPATCHED", "CONFIRMED")
    for _ in range(150):
        described = await as_json("describe", waiting.action_id, target=target)
        if described["action"]["state"] == "CONFIRMED":
            break
        await asyncio.sleep(0.2)
    assert described["action"]["approved_by"] == ["alice"]
    kinds = [e["kind"] for e in described["history"]]
    assert kinds[0] == "claim" and "approve" in kinds and kinds[-1] == "receipt"
    approval = described["history"][kinds.index("approve")]
    assert approval["principal"] == "alice" and approval["note"] == "checked"
    charge = [e for e in sim.ledger if e["metadata"].get(ACTION_METADATA_KEY) == waiting.action_id]
    assert len(charge) == 1 and described["history"][-1]["detail"]["external_id"] == charge[0]["id"]
    # The text view: the payload masked, the receipt, and the timeline.
    _, out, _ = await cli("describe", waiting.action_id, target=target)
    assert "Payload (sensitive fields masked):" in out and "pm_card_visa" not in out and "***" in out
    assert "Amount:" in out and "$10.00" in out and "To:" in out and "cus_42" in out
    assert "History:" in out and "approve" in out and "by alice: checked" in out and charge[0]["id"] in out
    _, out, _ = await cli("describe", waiting.action_id, "-o", "yaml", target=target)
    assert [e["kind"] for e in yaml.safe_load(out)["history"]] == kinds


def _spent(sim: StripeSimulator, actions: set[str]) -> int:
    return sum(int(e["params"]["amount"]) for e in sim.ledger if e["metadata"].get(ACTION_METADATA_KEY) in actions)


async def test_limits_and_a_grant_that_lets_one_charge_through(
    served: tuple[ChildGateway, str], sim: StripeSimulator
) -> None:
    gateway, target = served
    (before,) = await as_json("limits", target=target)  # only charge_limited has limits
    assert before["tool"] == "charge_limited" and before["window_start"] < before["window_end"]
    assert before["limits"] == [
        {"limit": "budget", "currency": "usd", "cap": 2000, "used": 0, "left": 2000, "run_id": ""}
    ]
    paid = {(await execute(target, f"p{n}", tool="charge_limited", scope=f"order:p{n}")).action_id for n in range(2)}
    (used,) = (await as_json("limits", "--tool", "charge_limited", target=target))[0]["limits"]
    assert (used["used"], used["left"]) == (_spent(sim, paid), 2000 - _spent(sim, paid)) == (2000, 0)

    # The third is refused and names the action it would have been.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await execute(target, "p2", tool="charge_limited", scope="order:p2")
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    would_be = details(refused.value)["ErrorInfo"].metadata["action_id"]
    granted = await as_json("grant-limit", would_be, "--note", "month-end run, approved by finance", target=target)
    assert granted["action_id"] == would_be and granted["principal"] == "alice"
    assert granted["granted_at"] < granted["expires_at"]
    # The agent's retry in the same step passes, once; the grant is in the action's story.
    third = await execute(target, "p2", tool="charge_limited", scope="order:p2")
    assert third.action_id == would_be and third.state == pb.EFFECT_STATE_CONFIRMED
    story = (await as_json("describe", would_be, target=target))["history"]
    assert [e["kind"] for e in story][:2] == ["claim", "limit_grant"]
    assert story[1]["principal"] == "alice" and story[1]["note"] == "month-end run, approved by finance"
    assert story[1]["detail"]["reason"] == "BUDGET_EXCEEDED" and story[1]["detail"]["figures"]["left"] == "0"
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await execute(target, "p3", tool="charge_limited", scope="order:p3")
    assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # A bypass of the limit counts: 30.00 used of 20.00, as at the provider.
    (after,) = (await as_json("limits", target=target))[0]["limits"]
    assert (after["used"], after["left"]) == (_spent(sim, {*paid, would_be}), 0) == (3000, 0)
    assert any('"grant_limit' in line and would_be in line and "alice" in line for line in gateway.output)
    # A used grant lets nothing more through; an action that holds its share needs no grant.
    _, _, err = await cli("grant-limit", would_be, "--note", "again", "--target", target, check=1)
    assert "GRANT_NOT_NEEDED" in err
    # The table: one line per cap under a header.
    _, out, _ = await cli("limits", "--tool", "charge_limited", target=target)
    lines = out.splitlines()
    assert lines[0].split() == ["TOOL", "LIMIT", "CURRENCY", "RUN", "CAP", "USED", "LEFT", "RESETS"]
    assert lines[1].split()[:7] == ["charge_limited", "budget", "usd", "-", "2000", "3000", "0"]


@pytest.mark.timeout(360)  # the waits below are WATCH_WAIT each: room for a loaded machine
async def test_watch_prints_what_changes_until_interrupted(served: tuple[ChildGateway, str]) -> None:
    _, target = served
    first = await execute(target, "w0")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", "actions", "--watch", "--interval", "0.2s", "-o", "json",
        "--target", target, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(""),
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WATCH_WAIT)
        assert json.loads(line)["action_id"] == first.action_id  # the listing as it is
        second = await execute(target, "w1")
        # Then what is new: the stream may show the claim (DISPATCHED) before the outcome; every
        # line is about the new action, and the last one it prints is its settled state.
        seen: list[str] = []
        while not seen or seen[-1] != "CONFIRMED":
            change = json.loads(await asyncio.wait_for(proc.stdout.readline(), WATCH_WAIT))
            assert change["action_id"] == second.action_id, change
            seen.append(change["state"])
        assert set(seen) <= {"DISPATCHED", "CONFIRMED"}, seen
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends a watch: exit 0
        assert await asyncio.wait_for(proc.wait(), WATCH_WAIT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # A table watch prints its header once; --watch-count bounds the polls.
    _, out, _ = await cli("actions", "-w", "--interval", "0.1s", "--watch-count", "2", target=target)
    assert out.count("ACTION") == 1 and out.count(first.action_id) == 1


async def test_version_comes_from_the_packages_metadata() -> None:
    _, out, _ = await process_cli("--version")
    assert out.strip() == f"effectgate {version('effectgate')} (client {version('effectgate-client')})"
