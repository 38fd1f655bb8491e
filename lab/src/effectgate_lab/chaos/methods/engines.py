"""The durable-execution engines as methods: `restate`, `dbos_sqlite`, `dbos_postgres`.

Each cell gets the engine's worker process (and for Restate its server) of its own. The agent's
tool call names the logical action, the run id and the step id the orchestrator gave (what
effectgate is given too): Restate receives it as the invocation's `idempotency-key`, DBOS as the
workflow id (`SetWorkflowID`), so a re-plan, a resume or a second subagent on the same step
attaches to the first invocation or workflow. Inside, the provider call is the engine's durable
step with a key derived from the engine's own identity for it (see peers/*_worker.py).

With two approvals to race (`approval_twice`) each engine waits for the person with its own
primitive, as its docs show (peers/approval_inbox.py): the handler or workflow asks the person's
inbox, then waits on a Restate awakeable or on DBOS `recv`; each click answers through the
engine's API (the ingress's awakeable resolve, the app's endpoint calling `DBOS.send`).

The engines have no read path: an answer they gave stands (nothing to reconcile). With --crash
the worker dies right after a provider answered and before the engine recorded the step, at a
seeded answer, KILLS_PER_CELL times a cell; it is restarted on its port and the engine recovers.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx

from effectgate_lab.chaos.methods.method import Answer, Method, Run
from effectgate_lab.chaos.model import Told
from effectgate_lab.chaos.peers.approval_inbox import ApprovalInbox
from effectgate_lab.chaos.peers.restate_server import RestateServer
from effectgate_lab.chaos.peers.supervisor import Worker
from effectgate_lab.chaos.peers.throwaway_pg import database_url

KILLS_PER_CELL = 2
CALL_BUDGET = 60.0  # the agent phase's own budget (30 s) ends an episode first
PATIENCE = 30.0  # how long a call keeps trying to reach a worker that is being restarted


def crash_points(runs: list[Run], crash: bool) -> list[int]:
    """After which provider answers (counted per worker life) the worker dies: seeded by the
    cell's episodes, early enough that other episodes are still in flight."""
    if not crash or not runs:
        return []
    first = runs[0].episode
    digest = hashlib.sha256(f"engine-crash:{first.part}:{first.scenario}:{first.level}".encode()).digest()
    return [1 + digest[i] % max(1, len(runs) // 2) for i in range(KILLS_PER_CELL)]


def action_id(run: Run, step: str) -> str:
    """The logical action: the run and the step id the orchestrator gave the step."""
    return f"{run.episode.run_id}/{step}"


def answer_of(body: dict[str, Any]) -> Answer:
    if body.get("told") == "success":
        return Answer(Told.SUCCESS, final=True)
    detail = str(body.get("detail", ""))
    # A definitive refusal ends the loop; a failed workflow lets the model re-plan (and the engine
    # answers the same action again with what it recorded).
    return Answer(Told.FAILURE, final=detail.startswith("HTTP 4"), detail=detail)


class EngineMethod(Method):
    module = ""
    kill_note = "worker died at the step's dangerous point"
    approves = True
    uses_folder = True  # the worker's log, DBOS's SQLite file

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.inbox = ApprovalInbox()
        self.http = httpx.AsyncClient(timeout=CALL_BUDGET)

    async def worker_args(self) -> list[str]:
        return []

    async def open(self, runs: list[Run], crash: bool) -> None:
        await self.inbox.start()
        log = self.cell_folder / "worker.log"
        self.worker = Worker(self.module, await self.worker_args(), log, crash_points(runs, crash))
        await self.worker.start()

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
        await self.http.aclose()
        await self.inbox.stop()

    async def quiesce(self) -> None:
        if self.worker is not None:
            self.kills = self.worker.deaths

    def request(self, run: Run, step: str, args: dict[str, Any]) -> dict[str, Any]:
        body = {"scenario": run.scenario.name, "base_url": run.sim.base_url, "typed": run.scenario.typed(args)}
        if run.episode.behaviour == "approval_twice":  # wait for the person first
            body |= {"approval": self.inbox.url, "action": action_id(run, step)}
        return body

    async def approval_asked(self, run: Run, step: str) -> str:
        return await self.inbox.asked(action_id(run, step))

    async def post_retrying(self, url: str, body: dict[str, Any]) -> httpx.Response | None:
        """POST to the worker; a worker that died under the call is waited for (the supervisor
        restarts it) until PATIENCE has passed (then None)."""
        assert self.worker is not None
        deadline = asyncio.get_running_loop().time() + PATIENCE
        while True:
            await self.worker.ready.wait()
            try:
                return await self.http.post(f"{self.worker.url}{url}", json=body)
            except httpx.TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    return None
                await asyncio.sleep(0.1)


class DbosMethod(EngineMethod):
    module = "effectgate_lab.chaos.peers.dbos_worker"

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        # A worker that died under the call is back with the workflow recovered by DBOS, and the
        # same workflow id attaches to it.
        reply = await self.post_retrying(
            "/call", {"workflow_id": action_id(run, step), **self.request(run, step, args)}
        )
        if reply is None:
            return Answer(Told.UNKNOWN, final=False, detail="worker unreachable")
        return answer_of(reply.json())

    async def approve(self, run: Run, token: str) -> bool:
        reply = await self.post_retrying("/approve", {"workflow_id": token})
        if reply is None or reply.status_code >= 300:
            run.notes.append(f"click not delivered: {'worker unreachable' if reply is None else reply.status_code}")
            return False
        return True


class DbosSqlite(DbosMethod):
    name = "dbos_sqlite"

    async def worker_args(self) -> list[str]:
        return ["--db", f"sqlite:///{self.cell_folder / 'dbos.sqlite'}"]


class DbosPostgres(DbosMethod):
    name = "dbos_postgres"

    async def worker_args(self) -> list[str]:
        return ["--db", await database_url()]


class RestateMethod(EngineMethod):
    name = "restate"
    module = "effectgate_lab.chaos.peers.restate_worker"

    def __init__(self) -> None:
        super().__init__()
        self.server: RestateServer | None = None

    async def open(self, runs: list[Run], crash: bool) -> None:
        self.server = RestateServer()
        await self.server.start()
        await super().open(runs, crash)
        assert self.worker is not None
        await self.server.register(self.worker.url)

    async def close(self) -> None:
        await super().close()
        if self.server is not None:
            await self.server.stop()

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        assert self.server is not None
        headers = {"idempotency-key": action_id(run, step)}
        try:
            reply = await self.http.post(
                f"{self.server.ingress}/ChaosTool/call", json=self.request(run, step, args), headers=headers
            )
        except httpx.TransportError as exc:
            return Answer(Told.UNKNOWN, final=False, detail=f"ingress: {type(exc).__name__}")
        if reply.status_code >= 300:  # a terminal failure of the invocation
            return Answer(Told.FAILURE, final=False, detail=f"invocation failed: HTTP {reply.status_code}")
        return answer_of(reply.json())

    async def approve(self, run: Run, token: str) -> bool:
        assert self.server is not None
        reply = await self.http.post(f"{self.server.ingress}/restate/awakeables/{token}/resolve", json="approved")
        if reply.status_code >= 300:
            run.notes.append(f"click not delivered: HTTP {reply.status_code} {reply.text[:80]}")
            return False
        return True
