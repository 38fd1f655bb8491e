"""`stable_key`: the strongest baseline an agent framework can build without a gateway.

The key is the logical action, hash(run, step, tool, scope), never the model's arguments, the
agent or the clock; it is sent to providers that take keys (Stripe) and kept in a client-side
dedup table for those that do not. The table lives with the run (it survives a resume and is
shared by subagents) and allows one call in flight per key: a second caller waits for the first
and gets its answer. A SUCCESS is replayed from the table; after an ambiguous end, the next call
checks the postcondition before sending again. Around each send it runs the verified wrapper's
loop (wait, check, re-run once on FALSE) with the shared wait.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from effectgate_lab.chaos.methods.method import Answer, Method, Run
from effectgate_lab.chaos.methods.wrapper import verified
from effectgate_lab.chaos.model import Told
from effectgate_lab.chaos.scenarios import Check


@dataclass
class Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    answer: Answer | None = None  # the last answer for the key; None: never sent


def stable_key(run: Run, step: str, typed: dict[str, Any]) -> str:
    material = f"{run.episode.run_id}|{step}|{run.scenario.name}|{run.scenario.scope(typed)}"
    return "sk_" + hashlib.sha256(material.encode()).hexdigest()[:40]


class StableKey(Method):
    name = "stable_key"

    def _table(self, run: Run) -> dict[str, Entry]:
        table: dict[str, Entry] = run.state.setdefault("table", {})
        return table

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        typed = run.scenario.typed(args)
        key = stable_key(run, step, typed)
        entry = self._table(run).setdefault(key, Entry())
        async with entry.lock:  # one call in flight per key; the next one sees its answer
            prior = entry.answer
            if prior is not None and (prior.told is Told.SUCCESS or prior.final):
                return prior
            if prior is None:
                reply = await run.scenario.send(run.http, typed, key=key, tag=key)
                answer = await verified(run, typed, key, reply)
            else:  # an earlier call ended ambiguous: read before sending again
                answer = await verified(run, typed, key, None)
            entry.answer = answer
            return answer

    async def settle(self, run: Run, told: Told) -> Told:
        if told is Told.SUCCESS:
            return told
        await asyncio.sleep(run.wait)
        typed = run.scenario.typed(run.scenario.args(run.episode.seed, False))
        seen = [await run.scenario.check(run.http, typed, key) for key in self._table(run)]
        if Check.TRUE in seen:
            return Told.SUCCESS
        return Told.UNKNOWN if Check.UNKNOWN in seen else told
