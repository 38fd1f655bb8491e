"""Human decisions against real `effectgate serve` processes and the Stripe simulator, effects
counted at the simulator: deny, expiry, approvals bound to the payload, two people, a crash
between the approval and the send, concurrent clicks, what people see, and the live inbox across
two PostgreSQL replicas."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.client import EffectGateClient
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, GatewayProcess, config_doc, stripe_tools
from tests.test_execute import details, effects, refused, request

TOKENS = {"bot": "bot-token-1", "alice": "alice-token-2", "bob": "bob-token-3", "carol": "carol-token-4"}
TOKENS |= {"watcher": "watcher-token-5", "mallory": "mallory-token-6", "gbot": "gbot-token-7"}


def principal(name: str, roles: list[str], tenant: str = "acme") -> dict[str, Any]:
    digest = hashlib.sha256(TOKENS[name].encode()).hexdigest()
    return {"name": name, "tenant": tenant, "token_sha256": digest, "roles": roles}


PRINCIPALS = [
    principal("bot", ["agent"]),
    principal("alice", ["operator"]),
    principal("bob", ["operator"]),
    principal("carol", ["operator"]),
    principal("watcher", ["observer"]),
    principal("mallory", ["operator", "observer"], tenant="globex"),
    principal("gbot", ["agent"], tenant="globex"),
]


def auth(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    simulator = StripeSimulator(api_key=API_KEY, search_lag=0.2)
    await simulator.start()
    yield simulator
    await simulator.stop()


class Served:
    def __init__(self, process: GatewayProcess) -> None:
        self.process = process
        self.client = EffectGateClient.connect(process.target)

    @property
    def stub(self) -> Any:
        return self.client.stub

    @property
    def operator(self) -> Any:
        return self.client.operator


_configs = itertools.count()


@asynccontextmanager
async def serve(
    tmp_path: Path, sim: StripeSimulator, *, store: str = "", crash_at: str = "", **tool: Any
) -> AsyncIterator[Served]:
    doc = config_doc(
        store or f"sqlite:///{tmp_path}/eg.db",
        principals=PRINCIPALS,
        **stripe_tools(sim.base_url, approval="required", **tool),
    )
    path = write_config(doc, tmp_path / f"effectgate-{next(_configs)}.toml")
    process = GatewayProcess(path, crash_at=crash_at)
    served: Served | None = None
    try:
        await process.ready()
        served = Served(process)
        yield served
    finally:
        if served is not None:
            await served.client.close()
        process.kill()


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await check():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.1)


async def refusal(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    code, found = await refused(call)
    return code, found["ErrorInfo"].reason


async def test_deny_answers_the_agent_rejected_with_the_reason(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim) as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        code, _ = await refusal(gw.operator.Deny(pb.DenyRequest(action_id=action_id), metadata=auth("alice")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT  # a denial says why
        denied = await gw.operator.Deny(
            pb.DenyRequest(action_id=action_id, note="wrong customer"), metadata=auth("alice")
        )
        assert denied.state == pb.EFFECT_STATE_REJECTED and denied.reason == "denied by alice: wrong customer"
        for call in ("resume", "later"):  # the waiting agent, and every later Execute: data, not an error
            again = await gw.stub.Execute(request(call=call), metadata=auth("bot"))
            assert again.action.state == pb.EFFECT_STATE_REJECTED
            assert again.action.reason == "denied by alice: wrong customer"
        # Deciding again, either way, is refused and changes nothing.
        for late in (
            gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="too late"), metadata=auth("bob")),
            gw.operator.Deny(pb.DenyRequest(action_id=action_id, note="again"), metadata=auth("bob")),
        ):
            assert await refusal(late) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_AWAITING_APPROVAL")
        story = await gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("alice"))
        assert [(e.kind, e.state, e.principal, e.note) for e in story.events] == [
            ("claim", pb.EFFECT_STATE_AWAITING_APPROVAL, "", ""),
            ("deny", pb.EFFECT_STATE_REJECTED, "alice", "wrong customer"),
        ]
        assert effects(sim) == []


async def test_an_approval_nobody_gives_expires_into_rejected(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim, approval_ttl="1s") as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        answers: list[pb.ExecuteResponse] = []

        async def expired() -> bool:
            answers.append(await gw.stub.Execute(request(call=f"poll-{len(answers)}"), metadata=auth("bot")))
            return bool(answers[-1].action.state == pb.EFFECT_STATE_REJECTED)

        await until(expired)
        assert answers[-1].action.reason == "approval expired after 1s"
        assert answers[-1].action.next_step == pb.NEXT_STEP_NONE
        late = gw.operator.Approve(
            pb.ApproveRequest(action_id=waiting.action.action_id, note="x"), metadata=auth("alice")
        )
        assert await refusal(late) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_AWAITING_APPROVAL")
        story = await gw.stub.GetActionHistory(
            pb.GetActionHistoryRequest(action_id=waiting.action.action_id), metadata=auth("watcher")
        )
        assert [e.kind for e in story.events] == ["claim", "expire"]
        assert effects(sim) == []


async def test_an_approval_binds_to_the_payload_it_was_shown(tmp_path: Path, sim: StripeSimulator) -> None:
    other = tools_pb2.ChargeCard(customer="cus_42", amount=99_000, currency="usd", payment_method="pm_card_visa")
    async with serve(tmp_path, sim) as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        # What the approver sees: the decoded payload, payment_method masked, and the binding.
        shown = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("alice"))
        assert dict(shown.payload) == {
            "customer": "cus_42",
            "amount": "1000",  # int64: JSON's string form
            "currency": "usd",
            "payment_method": "***",
        }
        assert shown.policy_version.startswith("pv_") and shown.approvals_required == 1
        # A re-plan with payload B while A waits: refused, nothing stored, nothing sent.
        code, reason = await refusal(gw.stub.Execute(request(payload=other, call="b"), metadata=auth("bot")))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PAYLOAD_MISMATCH")
        # An approval naming anything else than what is stored is stale.
        stale = pb.ApproveRequest(action_id=action_id, note="ok", fingerprint="sha256:other")
        assert await refusal(gw.operator.Approve(stale, metadata=auth("alice"))) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "APPROVAL_STALE",
        )
        stale = pb.ApproveRequest(action_id=action_id, note="ok", policy_version="pv_0000000000000000")
        assert (await refusal(gw.operator.Approve(stale, metadata=auth("alice"))))[1] == "APPROVAL_STALE"
        approved = await gw.operator.Approve(
            pb.ApproveRequest(
                action_id=action_id, note="ok", fingerprint=shown.fingerprint, policy_version=shown.policy_version
            ),
            metadata=auth("alice"),
        )
        assert approved.state in (pb.EFFECT_STATE_PLANNED, pb.EFFECT_STATE_DISPATCHED, pb.EFFECT_STATE_CONFIRMED)
        done = await gw.stub.Execute(request(call="resume"), metadata=auth("bot"))
        assert done.action.state == pb.EFFECT_STATE_CONFIRMED
        code, reason = await refusal(gw.stub.Execute(request(payload=other, call="b2"), metadata=auth("bot")))
        assert reason == "PAYLOAD_MISMATCH"
        await asyncio.sleep(0.5)  # the reconciler's passes: nothing more goes out
        assert [str(e["params"].get("amount")) for e in effects(sim)] == ["1000"]


async def test_two_people_approve_and_the_second_dispatches_once(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim, approvals=2) as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        first = await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth("alice"))
        assert first.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        again = await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok!"), metadata=auth("alice"))
        assert again.state == pb.EFFECT_STATE_AWAITING_APPROVAL  # the same person does not count twice
        await asyncio.sleep(1.0)  # several reconciler passes: one approval never dispatches
        assert effects(sim) == []
        shown = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("bob"))
        assert list(shown.approved_by) == ["alice"] and shown.approvals_required == 2
        second = await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth("bob"))
        assert second.state != pb.EFFECT_STATE_AWAITING_APPROVAL
        await until(lambda: _state_is(gw, action_id, pb.EFFECT_STATE_CONFIRMED))
        assert len(effects(sim)) == 1
        assert (await gw.stub.Execute(request(call="resume"), metadata=auth("bot"))).replayed
        story = await gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("bob"))
        kinds = [(e.kind, e.principal) for e in story.events]
        assert kinds[:3] == [("claim", ""), ("approve", "alice"), ("approve", "bob")]
        assert ("dispatch", "") in kinds and kinds[-1][0] == "receipt"
        assert len(effects(sim)) == 1


async def _state_is(gw: Served, action_id: str, state: int) -> bool:
    action = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("alice"))
    return bool(action.state == state)


async def test_a_crash_between_the_approval_and_the_send_makes_one_effect(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim, crash_at="after_planned") as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        with pytest.raises(grpc.aio.AioRpcError):  # the approval is committed, then the process dies
            await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth("alice"))
        assert await gw.process.wait_exit() != 0
    assert effects(sim) == []
    async with serve(tmp_path, sim) as gw:  # same database, no crash point
        await until(lambda: _state_is(gw, action_id, pb.EFFECT_STATE_CONFIRMED))
        resumed = await gw.stub.Execute(request(call="resume"), metadata=auth("bot"))
        assert resumed.action.state == pb.EFFECT_STATE_CONFIRMED and resumed.replayed
        assert len(effects(sim)) == 1


async def test_twenty_concurrent_decisions_one_wins(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim) as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        people = ["alice", "bob", "carol"]

        async def decide(i: int) -> tuple[str, str, int | str]:
            who = people[i % 3]
            try:
                if i % 2:
                    answer = await gw.operator.Deny(
                        pb.DenyRequest(action_id=action_id, note=f"no {i}"), metadata=auth(who)
                    )
                    return "deny", who, answer.state
                answer = await gw.operator.Approve(
                    pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth(who)
                )
                return "approve", who, answer.state
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
                return "refused", who, details(error)["ErrorInfo"].reason

        results = await asyncio.gather(*(decide(i) for i in range(20)))
        denials = [r for r in results if r[0] == "deny"]
        approvals = [r for r in results if r[0] == "approve"]
        assert all(r[2] == "NOT_AWAITING_APPROVAL" for r in results if r[0] == "refused")
        if denials:  # a denial won: it is the only successful decision
            assert len(denials) == 1 and approvals == []
            await until(lambda: _state_is(gw, action_id, pb.EFFECT_STATE_REJECTED))
            await asyncio.sleep(0.5)
            assert effects(sim) == []
        else:  # an approval won: only its principal's repeats answer OK (idempotent)
            assert len({who for _, who, _ in approvals}) == 1
            await until(lambda: _state_is(gw, action_id, pb.EFFECT_STATE_CONFIRMED))
            assert len(effects(sim)) == 1


async def test_what_people_see_and_what_agents_and_other_tenants_do_not(tmp_path: Path, sim: StripeSimulator) -> None:
    async with serve(tmp_path, sim) as gw:
        waiting = await gw.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        seen = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("watcher"))
        assert seen.payload["customer"] == "cus_42" and seen.payload["payment_method"] == "***"
        assert seen.context.run_id == "run-1" and seen.context.step_id == "charge" and seen.scope == "order:1093"
        assert seen.tool_call_id == "c1" and seen.HasField("created_at") and not seen.HasField("settled_at")
        agent = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("bot"))
        assert not agent.HasField("payload") and agent.action_id == action_id
        for call in (
            gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("mallory")),
            gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("mallory")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # the story is for people
            await gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("bot"))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth("alice"))
        await until(lambda: _state_is(gw, action_id, pb.EFFECT_STATE_CONFIRMED))
        done = await gw.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth("alice"))
        assert done.HasField("dispatched_at") and done.HasField("settled_at")
        # Approving a settled action is refused and not recorded.
        late = gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="again"), metadata=auth("bob"))
        assert await refusal(late) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_AWAITING_APPROVAL")
        assert len(effects(sim)) == 1


async def test_a_watch_on_one_replica_sees_an_action_made_on_another(
    tmp_path: Path, sim: StripeSimulator, pg_dsn: str
) -> None:
    async with (
        serve(tmp_path, sim, store=pg_dsn) as a,
        serve(tmp_path, sim, store=pg_dsn) as b,
    ):
        watch = b.stub.WatchActions(pb.WatchActionsRequest(tool="charge_card"), metadata=auth("watcher"))
        start = await asyncio.wait_for(watch.read(), 10)
        assert start.cursor and not start.HasField("action")
        # Seen at one of B's polls (every 0.25 s): the deadlines below only bound a hung stream; how
        # soon is not this test's claim (a loaded machine stretches it, and speed lives in benchmarks).
        waiting = await a.stub.Execute(request(), metadata=auth("bot"))
        seen = await asyncio.wait_for(watch.read(), 30)
        assert seen.action.action_id == waiting.action.action_id
        assert seen.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        # Denied on A: B's watch sees the change; a watch resumed from the first cursor sees it too.
        await a.operator.Deny(pb.DenyRequest(action_id=seen.action.action_id, note="no"), metadata=auth("alice"))
        changed = await asyncio.wait_for(watch.read(), 30)
        assert changed.action.state == pb.EFFECT_STATE_REJECTED
        watch.cancel()
        resumed = b.stub.WatchActions(pb.WatchActionsRequest(cursor=seen.cursor), metadata=auth("alice"))
        assert (await asyncio.wait_for(resumed.read(), 5)).cursor == seen.cursor
        again = await asyncio.wait_for(resumed.read(), 30)
        assert (again.action.action_id, again.action.state) == (seen.action.action_id, pb.EFFECT_STATE_REJECTED)
        resumed.cancel()
        assert effects(sim) == []


async def test_a_resumed_watch_sends_its_tenants_lookback_again_and_no_other_tenants(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    """A resumed watch sends again the actions whose last change is stamped in the 5 s before its
    cursor (tests/test_watch_clocks.py says why). A cursor is a position, not a permission: what it
    sends again is the caller's tenant's only."""
    async with serve(tmp_path, sim) as gw:
        watch = gw.stub.WatchActions(pb.WatchActionsRequest(), metadata=auth("alice"))
        await asyncio.wait_for(watch.read(), 10)  # the start
        first = await gw.stub.Execute(request(run="run-1"), metadata=auth("bot"))
        second = await gw.stub.Execute(request(run="run-2"), metadata=auth("bot"))
        seen = [await asyncio.wait_for(watch.read(), 30) for _ in range(2)]
        assert [m.action.action_id for m in seen] == [first.action.action_id, second.action.action_id]
        watch.cancel()
        cursor = seen[1].cursor

        # Acme's operator, resumed after the second: the first (in the 5 s before) comes again,
        # the cursor's own change does not; the second's denial does.
        resumed = gw.stub.WatchActions(pb.WatchActionsRequest(cursor=cursor), metadata=auth("alice"))
        assert (await asyncio.wait_for(resumed.read(), 10)).cursor == cursor
        again = await asyncio.wait_for(resumed.read(), 30)
        assert (again.action.action_id, again.action.state) == (
            first.action.action_id,
            pb.EFFECT_STATE_AWAITING_APPROVAL,
        )
        denied = gw.operator.Deny(pb.DenyRequest(action_id=second.action.action_id, note="no"), metadata=auth("alice"))
        await denied
        after = await asyncio.wait_for(resumed.read(), 30)
        assert (after.action.action_id, after.action.state) == (second.action.action_id, pb.EFFECT_STATE_REJECTED)
        resumed.cancel()

        # Another tenant's operator with acme's cursor: acme's lookback is not sent to it; the
        # first action it is sent is its own tenant's, made after it resumed.
        foreign = gw.stub.WatchActions(pb.WatchActionsRequest(cursor=cursor), metadata=auth("mallory"))
        assert (await asyncio.wait_for(foreign.read(), 10)).cursor == cursor
        own = await gw.stub.Execute(request(run="run-g"), metadata=auth("gbot"))
        delivered = await asyncio.wait_for(foreign.read(), 30)
        assert delivered.action.action_id == own.action.action_id and delivered.action.tenant == "globex"
        foreign.cancel()
        assert not sim.ledger  # every action waits for an approval: nothing was sent


async def test_a_cursor_the_gateway_did_not_issue_is_refused_with_its_field(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    async with serve(tmp_path, sim) as gw:
        for forged in ("not-a-cursor", "bm90IGEgY3Vyc29y", "%%%"):
            watch = gw.stub.WatchActions(pb.WatchActionsRequest(cursor=forged), metadata=auth("alice"))
            code, found = await refused(watch.read())
            assert code == grpc.StatusCode.INVALID_ARGUMENT, forged
            assert [v.field for v in found["BadRequest"].field_violations] == ["cursor"], forged
