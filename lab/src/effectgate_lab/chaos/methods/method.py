"""What every method offers the scripted agent: one tool call, and what happens around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from effectgate_lab.chaos.model import Episode, Told
from effectgate_lab.chaos.scenarios import Provider, Scenario

# Answers that say "refused, nothing done" (a 409 or 429 says "try again").
DEFINITIVE = frozenset({400, 401, 402, 403, 404, 422})


@dataclass
class Run:
    """One episode under one method: its own simulator, an HTTP client to it, the shared wait."""

    episode: Episode
    scenario: Scenario
    sim: Provider
    http: httpx.AsyncClient
    lag: float  # the provider's lag, which every method is told
    t0: float = 0.0
    notes: list[str] = field(default_factory=list)
    steps: set[str] = field(default_factory=set)  # logical step ids the agents used
    calls: int = 0  # tool calls the agents made
    # Method-owned state that outlives one tool call (the stable-key method's dedup table).
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def wait(self) -> float:
        """Every method's wait after an ambiguous answer, or its consistency window."""
        return round(self.episode.margin * self.lag, 4)


@dataclass(frozen=True)
class Answer:
    """What one tool call told the agent; `final` answers end the agent's loop."""

    told: Told
    final: bool
    detail: str = ""


def ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


class Method:
    name: str = ""
    # effectgate's window mode ("" or "auto", `--window`); other methods ignore it.
    window: str = ""
    # effectgate's tools with `unique = "scope"` (one action per business object); others ignore it.
    unique = False
    # The engines wait for a person themselves (an awakeable, DBOS recv): `approve` is one click.
    approves = False
    kills = 0  # kill -9s of the gateway during the cell
    kill_note = "gateway killed with SIGKILL"
    # Methods that keep files (stores, their processes' logs) get a directory of the cell's from
    # the runner before `open`: removed after the cell, kept (and named) when the cell fails.
    uses_folder = False
    folder: Path | None = None

    @property
    def cell_folder(self) -> Path:
        """`folder`, which the runner gives a method that `uses_folder` before `open`."""
        assert self.folder is not None, "the runner gives the cell's folder"
        return self.folder

    async def open(self, runs: list[Run], crash: bool) -> None:
        """Prepares the cell (effectgate starts its gateway here)."""

    async def close(self) -> None:
        """Tears the cell down."""

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        """One tool call by the model for logical step `step`, arguments as the model wrote them."""
        raise NotImplementedError

    async def approval_asked(self, run: Run, step: str) -> str:
        """Waits until the method asked the person to approve step `step`; what a click answers."""
        raise NotImplementedError

    async def approve(self, run: Run, token: str) -> bool:
        """One click of the person, answering `token` through the method's own primitive; whether
        the click was delivered."""
        raise NotImplementedError

    async def quiesce(self) -> None:
        """Every agent has answered: stop injecting process faults (kill -9)."""

    async def settle(self, run: Run, told: Told) -> Told:
        """Reconcile: the method's own read path, run once more after the agents answered.
        A method without a read path has nothing to run: its answer stands."""
        return told
