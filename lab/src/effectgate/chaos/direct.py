"""Method (a): the agent calls the provider itself and, after a timeout or an error, the model
re-plans. Its HTTP tool sends the tool-call id as the idempotency key, which is fresh after every
re-plan, so the key never matches an earlier attempt. A 200 is believed, whatever it says."""

from __future__ import annotations

from typing import Any

from effectgate.chaos.method import Answer, Method, Run
from effectgate.chaos.model import Told

# Answers that say "refused, nothing done" (a 409 or 429 says "try again").
DEFINITIVE = frozenset({400, 401, 402, 403, 404, 422})


class Direct(Method):
    name = "direct"

    async def call(self, run: Run, agent: str, call_id: str, args: dict[str, Any]) -> Answer:
        reply = await run.scenario.send(run.http, run.scenario.typed(args), key=call_id, tag=call_id)
        if reply.status is not None and 200 <= reply.status < 300:
            return Answer(Told.SUCCESS, final=True)
        if reply.status in DEFINITIVE:
            return Answer(Told.FAILURE, final=True, detail=f"HTTP {reply.status}")
        # A timeout, a reset, a 5xx, a 409: the model reports an error and tries again.
        return Answer(Told.FAILURE, final=False, detail=f"HTTP {reply.status or 'no answer'}")
