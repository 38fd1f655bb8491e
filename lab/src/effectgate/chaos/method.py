"""What every method offers the scripted agent: one tool call, and what happens around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from effectgate.chaos.model import Episode, Told
from effectgate.chaos.scenarios import Scenario
from effectgate.simulators.server import SimulatorServer


@dataclass
class Run:
    """One episode under one method: its own simulator, and an HTTP client to it."""

    episode: Episode
    scenario: Scenario
    sim: SimulatorServer
    http: httpx.AsyncClient
    t0: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Answer:
    """What one tool call told the agent; `final` answers end the agent's loop."""

    told: Told
    final: bool
    detail: str = ""


class Method:
    name: str = ""
    kills = 0  # kill -9s of the gateway during the cell

    async def open(self, runs: list[Run], options: Any) -> None:
        """Prepares the cell (effectgate starts its gateway here)."""

    async def close(self) -> None:
        """Tears the cell down."""

    async def interrupt_for_approval(self, run: Run) -> None:
        """The run hits a human approval before the tool runs; the human clicks twice."""

    async def call(self, run: Run, agent: str, call_id: str, args: dict[str, Any]) -> Answer:
        """One tool call by the model, with the arguments as the model wrote them."""
        raise NotImplementedError

    async def quiesce(self) -> None:
        """Every agent has answered: stop injecting process faults (kill -9)."""

    async def settle(self, run: Run, told: Told) -> Told:
        """After the faults stopped: what the agent knows once a reconciler could run.
        Without effectgate nothing runs after the agent, so its answer stands."""
        return told
