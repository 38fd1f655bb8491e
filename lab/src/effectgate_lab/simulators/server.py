"""The aiohttp base every provider simulator subclasses.

A subclass adds its provider routes in `add_routes`, clears its own state in `reset_state`,
shapes errors like its provider in `error_response`, and sends each *fresh write* (auth and
validation passed, not an idempotent replay) through `write`, which applies the injected fault
in one shared order:

    decide fault -> (latency) -> conflict? answer 409, no effect
                 -> rate_limit? answer 429 (or 503) with Retry-After, no effect
                 -> drop_before_commit? close the connection, no effect
                 -> lands_late? sleep slow_seconds (shielded: a caller that hangs up does not
                    stop it), then on as without a fault
                 (latency: `latency` plus a draw from `write_delay`, when set)
                 -> commit(fault)            # the subclass applies the effect, records the ledger
                 -> error_after_commit? the answer becomes a 500
                 -> slot.complete(answer)    # idempotency store keeps what the client should get
                 -> slow? sleep slow_seconds
                 -> drop_after_commit (or drop_delayed)? close the connection with no answer

Every simulator also serves the admin endpoints (no auth; loopback only):

    GET  /_sim/ledger   -> {"ledger": [effect, ...]}
    GET  /_sim/faults   -> {"plan": FaultPlan, "scripted": [...], "decisions": [...]}
    POST /_sim/faults   FaultPlan JSON (or {"level": "medium", "seed": 3}) -> {"plan": ...}
    POST /_sim/script   ["drop_after_commit", null, ...] -> {"scripted": [...]}
    POST /_sim/reset    clears the ledger, the script, the provider state; restarts the seed

Servers bind 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Protocol

from aiohttp import web

from effectgate_lab.simulators.faults import Fault, FaultInjector, FaultPlan

JsonDict = dict[str, Any]
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class SimResponse:
    """An HTTP answer as data, so an idempotency store can keep and replay it."""

    status: int
    body: JsonDict
    headers: dict[str, str] = field(default_factory=dict)


class AnswerSlot(Protocol):
    """Where `write` hands the final answer of a keyed request (see `idempotency.KeySlot`)."""

    def complete(self, response: SimResponse) -> None: ...

    def release(self) -> None: ...


Commit = Callable[[Fault | None], Awaitable[SimResponse]]


class SimulatorServer:
    """Base of the provider simulators: lifecycle, ledger, fault injection and admin routes."""

    # Name in the `python -m effectgate_lab.simulators` registry and in logs.
    name: ClassVar[str] = "simulator"

    def __init__(
        self,
        *,
        faults: FaultPlan | None = None,
        visibility_lag: float = 5.0,
        latency: float = 0.0,
    ) -> None:
        self.injector = FaultInjector(faults)
        # Effects actually applied: dicts with kind, params, at, idempotency_key (+ extras).
        self.ledger: list[JsonDict] = []
        # Default lag of a `delayed_visibility` effect when the plan does not set one.
        self.visibility_lag = visibility_lag
        # Processing time before a write commits; keyed requests hold their key meanwhile.
        self.latency = latency
        # Extra processing time of each fresh write, drawn uniformly from (low, high) seconds by a
        # generator of its own (seeded, so a run repeats): writes that land 0.4-1.6 s after they
        # were sent, in an order that differs from the order they were sent in.
        self.write_delay: tuple[float, float] | None = None
        self._delays = random.Random(0)
        self.base_url = ""
        # Provider API requests received (admin /_sim/ routes excluded): proves "no provider call".
        self.request_count = 0
        # W3C `traceparent` header of each provider API request ("" when absent): tracing tests
        # check that the gateway's trace reaches the provider.
        self.traceparents: list[str] = []
        self._runner: web.AppRunner | None = None
        self._late: set[asyncio.Task[SimResponse]] = set()  # `lands_late` writes not applied yet

    # -- hooks for subclasses -------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        """Adds the provider's routes."""

    def middlewares(self) -> list[Any]:
        """aiohttp middlewares of the app (e.g. a request-id header)."""
        return []

    def reset_state(self) -> None:
        """Clears the provider's own state (called by `reset`)."""

    def error_response(self, status: int, code: str, message: str) -> SimResponse:
        """An error in the provider's shape; used for the injected 409 and 500."""
        return SimResponse(status, {"error": {"code": code, "message": message}})

    def rate_limited(self) -> SimResponse:
        """The injected rate-limit refusal: the provider's error shape plus `Retry-After`."""
        plan = self.injector.plan
        answer = self.error_response(plan.rate_limit_status, "rate_limited", "Too many requests.")
        if plan.retry_after is None:
            return answer
        seconds = plan.retry_after
        value = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
        return SimResponse(answer.status, answer.body, {**answer.headers, "Retry-After": value})

    # -- shared helpers ----------------------------------------------------------------------

    def now(self) -> float:
        return time.time()

    def record(self, kind: str, params: JsonDict, *, idempotency_key: str | None = None, **extra: Any) -> JsonDict:
        """Appends one applied effect to the ledger and returns the entry."""
        entry: JsonDict = {
            "kind": kind,
            "params": params,
            "at": self.now(),
            "idempotency_key": idempotency_key,
            **extra,
        }
        self.ledger.append(entry)
        return entry

    def visibility_delay(self, fault: Fault | None, normal: float = 0.0) -> float:
        """Seconds until an effect committed under `fault` shows in search/list reads."""
        if fault in (Fault.DELAYED_VISIBILITY, Fault.DROP_DELAYED):
            lag = self.injector.plan.visibility_lag
            return max(normal, self.visibility_lag if lag is None else lag)
        return normal

    def reset(self) -> None:
        self.ledger.clear()
        self.injector.reset()
        self.reset_state()

    @staticmethod
    def render(response: SimResponse) -> web.Response:
        return web.json_response(response.body, status=response.status, headers=response.headers)

    @staticmethod
    def drop_connection(request: web.BaseRequest) -> NoReturn:
        """Closes the connection with no HTTP answer; the client sees a disconnect.

        Aborting the transport and raising CancelledError is aiohttp's own path for a client
        that went away: no response is written, nothing is logged as an error, and the server
        keeps serving other connections.
        """
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError

    async def write(
        self, request: web.BaseRequest, commit: Commit, *, slot: AnswerSlot | None = None
    ) -> web.StreamResponse:
        """Runs one fresh write under the next injected fault (order in the module doc)."""
        fault = self.injector.decide()
        completed = False
        try:
            delay = self.latency + (self._delays.uniform(*self.write_delay) if self.write_delay else 0.0)
            if delay > 0:
                await asyncio.sleep(delay)
            if fault is Fault.CONFLICT:
                # No effect, and nothing stored under the key: a retry later may succeed.
                return self.render(self.error_response(409, "conflict", "Injected conflict."))
            if fault is Fault.RATE_LIMIT:
                return self.render(self.rate_limited())
            if fault is Fault.DROP_BEFORE_COMMIT:
                self.drop_connection(request)  # the request is lost: nothing applied or stored
            if fault is Fault.LANDS_LATE:
                completed = True  # the late write completes (or releases) the slot itself
                return self.render(await self._land_late(commit, fault, slot))
            answer = await commit(fault)
            if fault is Fault.ERROR_AFTER_COMMIT:
                answer = self.error_response(500, "api_error", "Injected internal error.")
            if slot is not None:
                slot.complete(answer)
                completed = True
        finally:
            if slot is not None and not completed:
                slot.release()
        if fault is Fault.SLOW:
            await asyncio.sleep(self.injector.plan.slow_seconds)
        if fault in (Fault.DROP_AFTER_COMMIT, Fault.DROP_DELAYED):
            self.drop_connection(request)
        return self.render(answer)

    async def _land_late(self, commit: Commit, fault: Fault, slot: AnswerSlot | None) -> SimResponse:
        """`lands_late`: the write is applied `slow_seconds` from now in a task of its own, so a
        caller that gives up (its handler cancelled) does not stop it."""

        async def later() -> SimResponse:
            done = False
            try:
                await asyncio.sleep(self.injector.plan.slow_seconds)
                answer = await commit(fault)
                if slot is not None:
                    slot.complete(answer)
                    done = True
                return answer
            finally:
                if slot is not None and not done:
                    slot.release()

        task = asyncio.create_task(later())
        self._late.add(task)
        task.add_done_callback(self._late.discard)
        return await asyncio.shield(task)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, port: int = 0) -> str:
        """Serves on 127.0.0.1:`port` (0 = any free port) and returns the base URL."""
        if self._runner is not None:
            raise RuntimeError(f"{self.name} simulator already started")
        app = web.Application(middlewares=[self._count_requests, *self.middlewares()])
        app.router.add_get("/_sim/ledger", self._get_ledger)
        app.router.add_get("/_sim/faults", self._get_faults)
        app.router.add_post("/_sim/faults", self._post_faults)
        app.router.add_post("/_sim/script", self._post_script)
        app.router.add_post("/_sim/reset", self._post_reset)
        self.add_routes(app)
        # A short shutdown timeout: `stop` must not wait for held-back (slow) answers.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, LOOPBACK, port)
        await site.start()
        self._runner = runner
        bound_port = runner.addresses[0][1]
        self.base_url = f"http://{LOOPBACK}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        for task in list(self._late):
            task.cancel()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @web.middleware
    async def _count_requests(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.path.startswith("/_sim/"):
            self.request_count += 1
            self.traceparents.append(request.headers.get("traceparent", ""))
        return await handler(request)

    # -- admin endpoints -----------------------------------------------------------------------

    async def _get_ledger(self, request: web.Request) -> web.Response:
        return web.json_response({"ledger": self.ledger})

    def _faults_view(self) -> JsonDict:
        return {
            "plan": self.injector.plan.to_json(),
            "scripted": self.injector.scripted,
            "decisions": self.injector.decisions,
        }

    async def _get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self._faults_view())

    async def _post_faults(self, request: web.Request) -> web.Response:
        try:
            data = json.loads(await request.text())
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
            self.injector.configure(FaultPlan.from_json(data))
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(self._faults_view())

    async def _post_script(self, request: web.Request) -> web.Response:
        try:
            data = json.loads(await request.text())
            if not isinstance(data, list):
                raise ValueError("expected a JSON list of fault kinds")
            self.injector.script(data)
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(self._faults_view())

    async def _post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"reset": True})
