"""The study's two plainest methods (the agent calls the provider itself).

- `baseline`: one request per tool call, keyed by the tool-call id (fresh after every re-plan).
  A 2xx is believed whatever it shows; any other answer goes back to the model, which re-plans.
- `retries_only`: the tool retries an ambiguous answer (no answer, 5xx, 409, 429) itself, after
  the shared wait, up to MAX_RETRIES times, with no idempotency key and no read-back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from effectgate_lab.chaos.methods.method import DEFINITIVE, Answer, Method, Run, ok
from effectgate_lab.chaos.model import Told

MAX_RETRIES = 2


class Baseline(Method):
    name = "baseline"

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        reply = await run.scenario.send(run.http, run.scenario.typed(args), key=call_id, tag=call_id)
        if ok(reply.status):
            return Answer(Told.SUCCESS, final=True)
        detail = f"HTTP {reply.status or 'no answer'}"
        return Answer(Told.FAILURE, final=reply.status in DEFINITIVE, detail=detail)


class Retrying(Method):
    """Retries an ambiguous answer with the same key (None: no key at all)."""

    def key(self, run: Run, agent: str, call_id: str, typed: dict[str, Any]) -> str | None:
        return None

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        typed = run.scenario.typed(args)
        key = self.key(run, agent, call_id, typed)
        tag = key or call_id
        for attempt in range(1 + MAX_RETRIES):
            if attempt:
                await asyncio.sleep(run.wait)
            reply = await run.scenario.send(run.http, typed, key=key, tag=tag)
            if ok(reply.status):
                return Answer(Told.SUCCESS, final=True)
            if reply.status in DEFINITIVE:
                return Answer(Told.FAILURE, final=True, detail=f"HTTP {reply.status}")
        return Answer(Told.FAILURE, final=False, detail=f"HTTP {reply.status or 'no answer'} after retries")


class RetriesOnly(Retrying):
    name = "retries_only"
