"""History checker (Jepsen-style): a random workload of duplicate, concurrent and re-planned
Executes against a provider at the study's high fault level; then, from the provider's ledger:
at most one effect per action, every acknowledged success has its effect, nothing left unsettled."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.faults import FaultPlan
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, start_gateway, stripe_tools
from tests.test_execute import request

# One call: (which logical action, how many concurrent copies, the client's patience).
calls = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.sampled_from([0.3, 5.0])), min_size=1, max_size=10)


async def run_history(workload: list[tuple[int, int, float]], seed: int) -> None:
    sim = StripeSimulator(api_key=API_KEY, search_lag=0.2, faults=FaultPlan.study_level("high", seed=seed))
    sim.visibility_lag = 0.4
    sim.settle_seconds = 0.3
    await sim.start()
    with tempfile.TemporaryDirectory() as tmp:
        live = await start_gateway(
            config_doc(f"sqlite:///{Path(tmp)}/eg.db", **stripe_tools(sim.base_url, consistency_window="0.5s"))
        )
        acknowledged: dict[str, str] = {}
        payloads: dict[int, tools_pb2.ChargeCard] = {}
        try:
            for index, copies, patience in workload:
                payload = tools_pb2.ChargeCard(
                    customer=f"cus_{index}", amount=100 + index, currency="usd", payment_method="pm_card_visa"
                )
                payloads[index] = payload
                answers = await asyncio.gather(
                    *(
                        live.stub.Execute(request(step=f"s{index}", payload=payload, call=f"c{i}"), timeout=patience)
                        for i in range(copies)
                    ),
                    return_exceptions=True,
                )
                for answer in answers:
                    if isinstance(answer, pb.ExecuteResponse) and answer.action.state == pb.EFFECT_STATE_CONFIRMED:
                        acknowledged[answer.action.action_id] = answer.action.receipt.external_id
                    else:
                        assert isinstance(answer, pb.ExecuteResponse | grpc.aio.AioRpcError), answer
            sim.injector.configure(FaultPlan())  # the faults stop; the reconciler settles the rest
            for _ in range(50):
                actions = (await live.stub.ListActions(pb.ListActionsRequest(page_size=100))).actions
                if all(a.state == pb.EFFECT_STATE_CONFIRMED for a in actions):
                    break
                # Agents that gave up come back, as a resumed run would: the same run, step and
                # scope again (UNKNOWN is re-verified, a proven NOT_FOUND dispatched again).
                await asyncio.gather(
                    *(live.stub.Execute(request(step=f"s{i}", payload=p, call="resume")) for i, p in payloads.items()),
                    return_exceptions=True,
                )
                await asyncio.sleep(0.1)
            per_action = Counter(e["metadata"].get(ACTION_METADATA_KEY) for e in sim.ledger)
            assert all(n == 1 for n in per_action.values()), per_action
            ids_in_ledger = {e["id"] for e in sim.ledger}
            for action_id, external_id in acknowledged.items():
                assert per_action[action_id] == 1 and external_id in ids_in_ledger
            assert {a.state for a in actions} <= {pb.EFFECT_STATE_CONFIRMED}, [
                (a.action_id, a.state, a.reason) for a in actions
            ]
            assert set(per_action) == {a.action_id for a in actions}
        finally:
            await live.close()
            await sim.stop()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=calls, seed=st.integers(0, 10_000))
def test_random_histories_never_duplicate(workload: list[tuple[int, int, float]], seed: int) -> None:
    asyncio.run(run_history(workload, seed))
