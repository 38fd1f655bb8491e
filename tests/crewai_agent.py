"""A CrewAI crew (Crew, Agent, Task, an `effect_tool`) with a scripted model, run by
tests/test_crewai.py under `.venv-crewai/bin/python` (CrewAI cannot share the gateway's
environment: docs/agents.md).

    python -m tests.crewai_agent --target HOST:PORT --scenario {timeout,model-fails} [--timeout S]

Prints `builder <customer> <currency>` each time CrewAI invokes the tool, `answer <n> <text>` for
each kickoff's final answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM

from effectgate.client.crewai import EffectRun, effect_tool
from effectgate.client.sync import SyncEffectGateClient
from effectgate.tools.v1.tools_pb2 import ChargeCard


def react(customer: str, currency: str) -> str:
    args = json.dumps({"customer": customer, "amount_cents": 1000, "currency": currency})
    return f"Thought: charge the deposit\nAction: charge_deposit\nAction Input: {args}"


REWORDED = [("cus_42", "usd"), (" cus_42", "USD"), ("cus_42 ", "Usd"), (" cus_42 ", "uSD")]


def observations(messages: str | list[Any]) -> list[str]:
    texts = [messages] if isinstance(messages, str) else [str(m.get("content", "")) for m in messages]
    return [t for t in texts if "action_id" in t]


class ScriptedLLM(BaseLLM):  # type: ignore[misc]
    """Plays the model: call the tool until its answer says Done.; optionally fail once after the
    first answer (a model provider that went away), then re-plan with reworded arguments."""

    fail_after_first: bool = False
    failed: bool = False

    def call(self, messages: str | list[Any], *args: Any, **kwargs: Any) -> str:
        seen = observations(messages)
        done = [t for t in seen if "Done." in t]
        if done:
            if self.fail_after_first and not self.failed:
                self.failed = True
                raise RuntimeError("the model provider went away")
            answer = done[-1][done[-1].index("Done.") :].splitlines()[0]
            return f"Thought: I know the final answer\nFinal Answer: {answer}"
        if self.failed:
            return react(" cus_42", "USD")
        # CrewAI refuses a call identical to the previous one ("I tried reusing the same input"):
        # after a failure the model rewords its arguments, which is the same logical action.
        tried = sum(
            str(m).count("Action: charge_deposit") for m in ([messages] if isinstance(messages, str) else messages)
        )
        return react(*REWORDED[tried % len(REWORDED)])

    def supports_function_calling(self) -> bool:
        return False


def crew(gate: SyncEffectGateClient, llm: ScriptedLLM, run_id: str) -> Crew:
    run = EffectRun(gate, run_id=run_id, scope="order:1093")

    @effect_tool("charge_card", run=run)
    def charge_deposit(customer: str, amount_cents: int, currency: str) -> ChargeCard:
        """Charge the order's deposit."""
        print("builder", customer.strip(), currency, flush=True)
        return ChargeCard(customer=customer, amount=amount_cents, currency=currency, payment_method="pm_card_visa")

    billing = Agent(
        role="billing", goal="charge deposits", backstory="a careful clerk", llm=llm, tools=[charge_deposit]
    )
    task = Task(
        name="charge-deposit",
        description="Charge the deposit of order 1093.",
        expected_output="the charge's state",
        agent=billing,
    )
    return Crew(agents=[billing], tasks=[task])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--scenario", choices=["timeout", "model-fails"], required=True)
    parser.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args()
    gate = (
        SyncEffectGateClient(args.target, timeout=args.timeout) if args.timeout else SyncEffectGateClient(args.target)
    )
    try:
        kickoffs = 1 if args.scenario == "timeout" else 2  # a re-kickoff of a fresh crew, same run id
        for n in range(1, kickoffs + 1):
            llm = ScriptedLLM(model="scripted", fail_after_first=args.scenario == "model-fails" and n == 1)
            result = crew(gate, llm, f"crew-{args.scenario}").kickoff()
            print("answer", n, result.raw, flush=True)
    finally:
        gate.close()


if __name__ == "__main__":
    main()
