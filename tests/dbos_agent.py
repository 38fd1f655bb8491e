"""A Pydantic AI agent durable under DBOS (`DBOSDurability`, SQLite system database, no server), in
a process of its own so that tests/test_pydantic_ai_dbos.py can crash it inside the tool's DBOS
step, after the charge and before DBOS records the step, and start it again: DBOS's recovery at
launch re-runs the workflow, replays the recorded model step and re-executes the tool's step.

    python -m tests.dbos_agent --system-db DB --target HOST:PORT --workflow-id ID --order O [--crash] [--recover]

Prints `tool run_id=<ctx.run_id>` each time the tool's step runs and `result <text>` at the end;
with `--crash` the process exits with CRASHED right after the gateway answered.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from dbos import DBOS, SetWorkflowID, WorkflowHandleAsync
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from effectgate.client import EffectGateClient
from effectgate.client.pydantic_ai import EffectRun, effect
from effectgate.tools.v1.tools_pb2 import ChargeCard

CRASHED = 3


def script(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    """Charge first; once the tool answered, say so."""
    if not any(isinstance(m, ModelResponse) for m in messages):
        args = {"customer": "cus_dbos", "amount_cents": 1000}
        return ModelResponse(parts=[ToolCallPart("charge_deposit", args, tool_call_id="call_dbos_1")])
    return ModelResponse(parts=[TextPart("charged")])


def build(gate: EffectGateClient, crash: bool) -> Agent[EffectRun, str]:
    agent = Agent(FunctionModel(script), name="billing", deps_type=EffectRun, capabilities=[DBOSDurability()])

    @agent.tool
    async def charge_deposit(ctx: RunContext[EffectRun], customer: str, amount_cents: int) -> str:
        """Charge the order's deposit."""

        async def charge() -> str:
            print(f"tool run_id={ctx.run_id}", flush=True)
            card = ChargeCard(customer=customer, amount=amount_cents, currency="usd", payment_method="pm_card_visa")
            text = await effect(ctx, "charge_card", card, client=gate)
            if crash:
                os._exit(CRASHED)  # the process dies before DBOS records the step's output
            return text

        return await DBOS.run_step_async({"name": "charge_deposit.effect"}, charge)

    return agent


async def main() -> None:
    parser = argparse.ArgumentParser()
    for option in ("--system-db", "--target", "--workflow-id", "--order"):
        parser.add_argument(option, required=True)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--recover", action="store_true")
    args = parser.parse_args()

    DBOS(config={"name": "effectgate-dbos-test", "system_database_url": f"sqlite:///{args.system_db}"})
    gate = EffectGateClient.connect(args.target)
    agent = build(gate, args.crash)

    @DBOS.workflow(name="checkout")
    async def checkout(order: str) -> str:
        result = await agent.run("charge the deposit", deps=EffectRun(scope=f"order:{order}"))
        return result.output

    DBOS.launch()  # recovers this executor's pending workflows
    handle: WorkflowHandleAsync[str]
    try:
        if args.recover:
            handle = await DBOS.retrieve_workflow_async(args.workflow_id)
        else:
            with SetWorkflowID(args.workflow_id):
                handle = await DBOS.start_workflow_async(checkout, args.order)
        print(f"result {await handle.get_result()}", flush=True)
    finally:
        await gate.close()
        DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main())
