"""Method (b): the 2026 study's verify-then-retry wrapper, as its Algorithm 1 describes it.

    key = hash(agent, action, payload, time bucket)
    execute(key)
    SUCCESS -> return True, without reading state
    FAILURE (a definite refusal) -> return False
    AMBIGUOUS -> wait, check the postcondition:
        TRUE -> True;  UNKNOWN -> wait and check again;  FALSE -> re-run once with the same key

It is implemented as written, so its known failure modes stay visible: a stale read (delayed
visibility) looks like absence and triggers the re-run; the key helps only at a provider that
deduplicates on it; the key changes when the model paraphrases the payload, when another agent
calls, or when the time bucket rolls; and an existence-only check passes a half-done effect.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from typing import Any

from effectgate.chaos.method import Answer, Method, Run
from effectgate.chaos.model import Told
from effectgate.chaos.scenarios import Check, Reply, Scenario

BUCKET_SECONDS = 1.0  # the study's timestamp bucket, on the harness's compressed clock
WAIT = 0.1  # wait(i) = i * WAIT before the i-th check
MAX_CHECKS = 3
MAX_RERUNS = 1


def wrapper_key(agent: str, action: str, payload: dict[str, Any], bucket: int) -> str:
    material = json.dumps([agent, action, payload, bucket], sort_keys=True, separators=(",", ":"))
    return "vtc_" + hashlib.sha256(material.encode()).hexdigest()[:40]


def classify(reply: Reply, scenario: Scenario) -> str:
    """SUCCESS / FAILURE / AMBIGUOUS, from the answer alone. A partial success is ambiguous: the
    study's wrapper reaches 100 % task success only by re-running those."""
    if reply.status is None or reply.status >= 500:
        return "AMBIGUOUS"
    if 200 <= reply.status < 300:
        return "AMBIGUOUS" if scenario.half_done(reply) else "SUCCESS"
    return "FAILURE"


class Wrapper(Method):
    name = "wrapper"

    def bucket(self, run: Run) -> int:
        elapsed = time.monotonic() - run.t0
        return math.floor(elapsed / BUCKET_SECONDS + run.episode.bucket_phase)

    async def call(self, run: Run, agent: str, call_id: str, args: dict[str, Any]) -> Answer:
        # The key hashes the payload as the model wrote it: a paraphrase is another key.
        key = wrapper_key(agent, run.scenario.name, args, self.bucket(run))
        typed = run.scenario.typed(args)
        reply = await run.scenario.send(run.http, typed, key=key, tag=key)
        reruns = 0
        for i in range(1, MAX_CHECKS + 1):
            kind = classify(reply, run.scenario)
            if kind == "SUCCESS":
                return Answer(Told.SUCCESS, final=True)
            if kind == "FAILURE":
                return Answer(Told.FAILURE, final=False, detail=f"HTTP {reply.status}")
            await asyncio.sleep(WAIT * i)
            seen = await run.scenario.check(run.http, typed, key)
            if seen == Check.TRUE:
                return Answer(Told.SUCCESS, final=True)
            if seen == Check.FALSE:
                if reruns >= MAX_RERUNS:
                    break
                reruns += 1
                reply = await run.scenario.send(run.http, typed, key=key, tag=key)
        # Out of checks: the study's wrapper reports failure and the model re-plans.
        return Answer(Told.FAILURE, final=False, detail="not verified")
