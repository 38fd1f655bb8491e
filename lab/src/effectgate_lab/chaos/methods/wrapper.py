"""The study's keyed methods: `idempotency_only` and the verified wrapper (its Algorithm 1).

    key = hash(agent, action, normalized payload, time bucket)
    execute(key)
    SUCCESS -> return True, without reading state
    FAILURE (a definite refusal) -> return False
    AMBIGUOUS -> wait, check the postcondition:
        TRUE -> True;  UNKNOWN -> wait and check again;  FALSE -> re-run once with the same key

The wait is the shared one (margin x the lag the method is told), so the first check runs after
a delayed write became visible and a half-done one finished, as a fair wrapper would be tuned.
Its remaining failure modes are the study's own: the key helps only at a provider that
deduplicates on it; it changes when another agent calls or the time bucket rolls; a read that is
still stale reads as absence; a half-done effect that never finishes reads FALSE and is re-run.

`idempotency_only` sends the same key and retries an ambiguous answer with it, without reading.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from typing import Any

from effectgate_lab.chaos.methods.direct import Retrying
from effectgate_lab.chaos.methods.method import DEFINITIVE, Answer, Method, Run, ok
from effectgate_lab.chaos.model import Told
from effectgate_lab.chaos.scenarios import Check, Reply, Scenario

BUCKET_SECONDS = 1.0  # the study's timestamp bucket, on the harness's compressed clock
MAX_CHECKS = 3
MAX_RERUNS = 1


def wrapper_key(agent: str, action: str, payload: dict[str, Any], bucket: int) -> str:
    """The study's key; `payload` is the normalized (typed) payload, so a paraphrase keeps it."""
    material = json.dumps([agent, action, payload, bucket], sort_keys=True, separators=(",", ":"))
    return "vtc_" + hashlib.sha256(material.encode()).hexdigest()[:40]


def bucket(run: Run) -> int:
    return math.floor((time.monotonic() - run.t0) / BUCKET_SECONDS + run.episode.bucket_phase)


def classify(reply: Reply, scenario: Scenario) -> str:
    """SUCCESS / FAILURE / AMBIGUOUS, from the answer alone. A 2xx that shows a half-done effect
    is ambiguous: the study's wrapper reaches 100 % task success only by checking those."""
    if reply.status is None or reply.status >= 500:
        return "AMBIGUOUS"
    if ok(reply.status):
        return "AMBIGUOUS" if scenario.half_done(reply) else "SUCCESS"
    return "FAILURE"


async def verified(run: Run, typed: dict[str, Any], key: str, reply: Reply | None) -> Answer:
    """Algorithm 1 from an answer (or, with None, from a check: the step may already be done)."""
    reruns = checks = 0
    kind = "AMBIGUOUS" if reply is None else classify(reply, run.scenario)
    while True:
        if kind == "SUCCESS":
            return Answer(Told.SUCCESS, final=True)
        if kind == "FAILURE":
            assert reply is not None
            return Answer(Told.FAILURE, final=reply.status in DEFINITIVE, detail=f"HTTP {reply.status}")
        if checks or reply is not None:
            await asyncio.sleep(run.wait)
        seen = await run.scenario.check(run.http, typed, key)
        checks += 1
        if seen == Check.TRUE:
            return Answer(Told.SUCCESS, final=True)
        if seen == Check.FALSE:
            if reruns >= MAX_RERUNS:
                break
            reruns += 1
            reply = await run.scenario.send(run.http, typed, key=key, tag=key)
            kind = classify(reply, run.scenario)
        elif checks >= MAX_CHECKS:
            break
    # Out of checks or re-runs: the wrapper reports failure and the model re-plans.
    return Answer(Told.FAILURE, final=False, detail="not verified")


class Wrapper(Method):
    name = "wrapper"

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        typed = run.scenario.typed(args)
        key = wrapper_key(agent, run.scenario.name, typed, bucket(run))
        run.state.setdefault("keys", {})[agent] = key
        reply = await run.scenario.send(run.http, typed, key=key, tag=key)
        return await verified(run, typed, key, reply)

    async def settle(self, run: Run, told: Told) -> Told:
        """Its read path once more: the postcondition of its last key, read-only."""
        if told is Told.SUCCESS:
            return told
        await asyncio.sleep(run.wait)
        typed = run.scenario.typed(run.scenario.args(run.episode.seed, False))
        seen = [await run.scenario.check(run.http, typed, k) for k in run.state.get("keys", {}).values()]
        if Check.TRUE in seen:
            return Told.SUCCESS
        return Told.UNKNOWN if Check.UNKNOWN in seen else told


class IdempotencyOnly(Retrying):
    name = "idempotency_only"

    def key(self, run: Run, agent: str, call_id: str, typed: dict[str, Any]) -> str | None:
        return wrapper_key(agent, run.scenario.name, typed, bucket(run))
