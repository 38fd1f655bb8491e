"""Run context for agent runtimes: set once per run, inherited by subagents.

The runtime (not the model) owns these ids. `run_id` names one user request; `step_id` names a
logical step and must stay the same when the model re-plans or the run resumes after an approval
or a crash — name steps after what they are (`"charge-deposit"`, a graph node plus its loop
index), never after a counter of tool calls or the model's tool-call id.
"""

from __future__ import annotations

import contextvars
import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from effectgate.v1 import gateway_pb2


@dataclass(frozen=True)
class RunContext:
    run_id: str
    step_id: str = ""
    parent_run_id: str = ""
    agent: str = ""

    def to_pb(self) -> gateway_pb2.RunContext:
        return gateway_pb2.RunContext(
            run_id=self.run_id, step_id=self.step_id, parent_run_id=self.parent_run_id, agent=self.agent
        )


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("effectgate_run_context", default=None)


def current() -> RunContext:
    ctx = _current.get()
    if ctx is None:
        raise LookupError("no effectgate run context: wrap the agent run in `with run(...)`")
    return ctx


def stable_step_id(*parts: object) -> str:
    """A step id from stable parts (node name, loop index, business ids): same parts, same id."""
    return "step-" + hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:24]


@contextmanager
def _using(ctx: RunContext) -> Iterator[RunContext]:
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


@contextmanager
def run(run_id: str | None = None, *, agent: str = "", parent_run_id: str = "") -> Iterator[RunContext]:
    """One agent run. Pass the id your runtime persists (so a resumed run keeps it); a new one is
    made only for a brand-new run."""
    with _using(
        RunContext(run_id=run_id or f"run-{uuid.uuid4().hex}", agent=agent, parent_run_id=parent_run_id)
    ) as ctx:
        yield ctx


@contextmanager
def step(step_id: str) -> Iterator[RunContext]:
    """The logical step the next tool calls belong to."""
    if not step_id:
        raise ValueError("step_id must not be empty")
    with _using(replace(current(), step_id=step_id)) as ctx:
        yield ctx


@contextmanager
def subagent(agent: str) -> Iterator[RunContext]:
    """A subagent inherits the run (and the current step): two subagents that both believe they
    own a step produce one action, not two. Only `agent` changes, for tracing."""
    with _using(replace(current(), agent=agent)) as ctx:
        yield ctx
