"""The DBOS method's worker: the agent's tool call as a DBOS workflow whose provider call is a
step, as DBOS's docs recommend for a payment or an email.

    python -m effectgate_lab.chaos.peers.dbos_worker --port P --db sqlite:///FILE|postgresql://...

- The workflow id is the caller's (`SetWorkflowID`, DBOS's idempotency key for a workflow): the
  harness passes the logical action (run id and step), so a re-plan, a resume or a second
  subagent with the same step attaches to the same workflow instead of starting another.
- The idempotency key sent to the provider is the workflow id and the step id, stable across the
  step's retries and across recovery after a crash.
- The step retries ambiguous answers with DBOS's own defaults once retries are on (3 attempts,
  1 s apart, backoff 2); DBOS leaves retries off by default, which would leave a 5xx unretried.
- At launch DBOS recovers the workflows a killed worker left pending and re-runs their
  unrecorded step, with the same key.

- With an approval to wait for (the request names the person's inbox as `approval`), the
  workflow first waits for a person as DBOS's docs show: a step delivers the request (the
  workflow id the person answers to), then `DBOS.recv` on the "approval" topic with DBOS's
  default timeout (APPROVAL_WAIT). The person's click is the app's endpoint calling `DBOS.send`
  to the workflow id (POST /approve); a second click's message waits in the queue, unread.

POST /call {workflow_id, scenario, base_url, typed[, approval, action]} answers {told, detail};
POST /approve {workflow_id} sends the approval.
"""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web
from dbos import DBOS, SetWorkflowID, StepOptions

from effectgate_lab.chaos.peers.approval_inbox import APPROVAL_WAIT, ask
from effectgate_lab.chaos.peers.provider_call import JsonDict, Providers
from effectgate_lab.chaos.peers.worker_http import announce, crash_point, parse

# DBOS's step defaults (`@DBOS.step()`), with retries turned on.
STEP_OPTIONS: StepOptions = {
    "name": "provider_call",
    "retries_allowed": True,
    "max_attempts": 3,
    "interval_seconds": 1.0,
    "backoff_rate": 2.0,
}
ASK_OPTIONS: StepOptions = {**STEP_OPTIONS, "name": "ask_for_approval"}
TOPIC = "approval"
PROVIDERS = Providers()


@DBOS.workflow(name="tool_call")
async def tool_call(request: JsonDict) -> JsonDict:
    if request.get("approval"):
        workflow_id = str(DBOS.workflow_id)
        await DBOS.run_step_async(ASK_OPTIONS, ask, request["approval"], request["action"], workflow_id)
        if await DBOS.recv_async(TOPIC, timeout_seconds=APPROVAL_WAIT) is None:
            return {"told": "failure", "detail": "approval timed out"}

    async def provider_call() -> JsonDict:
        key = f"{DBOS.workflow_id}-{DBOS.step_id}"
        answer = await PROVIDERS.call(request, key)
        crash_point()
        return answer

    return await DBOS.run_step_async(STEP_OPTIONS, provider_call)


async def handle(request: web.Request) -> web.Response:
    body: JsonDict = await request.json()
    with SetWorkflowID(body["workflow_id"]):
        handle = await DBOS.start_workflow_async(tool_call, body)
    try:
        answer = await handle.get_result()
    except Exception as exc:  # the step ran out of retries: the workflow failed
        answer = {"told": "failure", "detail": f"workflow failed: {type(exc).__name__}"}
    return web.json_response(answer)


async def approve(request: web.Request) -> web.Response:
    """The person's click: the app sends the approval to the waiting workflow."""
    body: JsonDict = await request.json()
    await DBOS.send_async(body["workflow_id"], "approved", TOPIC)
    return web.json_response({})


async def serve(port: int, db: str, fd: int = -1) -> None:
    DBOS(config={"name": "effectgate-chaos", "system_database_url": db, "log_level": "ERROR"})
    DBOS.launch()  # recovers what a killed worker left pending
    app = web.Application()
    app.router.add_post("/call", handle)
    app.router.add_post("/approve", approve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    if fd >= 0:  # the supervisor's socket, already bound and listening on `port`
        await web.SockSite(runner, socket.socket(fileno=fd)).start()
    else:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    announce(port)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await PROVIDERS.close()
        DBOS.destroy()


def main() -> None:
    args = parse("dbos_worker")
    asyncio.run(serve(args.port, args.db, args.fd))


if __name__ == "__main__":
    main()
