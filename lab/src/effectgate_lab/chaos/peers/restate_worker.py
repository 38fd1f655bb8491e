"""The Restate method's worker: the agent's tool call as a Restate service handler whose provider
call runs in `ctx.run`, as Restate's docs recommend for a payment or an email.

    python -m effectgate_lab.chaos.peers.restate_worker --port P [--fd N]

- The harness invokes the handler through the Restate server's ingress with an `idempotency-key`
  header naming the logical action (run id and step), so a re-plan, a resume or a second subagent
  with the same step attaches to the same invocation instead of starting another.
- The idempotency key sent to the provider is the invocation id and the step's name: stable
  across the invocation's retries and across a worker that died mid-step.
- `ctx.run` has no retry options of its own: the server's default invocation retry policy applies
  (Restate 1.7: 500 ms, doubling, at most 70 attempts, then the invocation pauses).
- With an approval to wait for (the request names the person's inbox as `approval`), the handler
  first waits for a person as Restate's docs show: an awakeable, its id delivered to the inbox
  inside `ctx.run` (so a retry does not ask twice), then `await` on it, raced against a durable
  `ctx.sleep` of APPROVAL_WAIT (a `restate.select`, the SDK's way to time a wait). The person
  resolves it through the ingress (`POST /restate/awakeables/{id}/resolve`); a second click
  completes an awakeable already completed, which Restate ignores.
- The request body carries {scenario, base_url, typed} (and `approval`, `action` with an approval);
  the handler answers {told, detail}.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config

from effectgate_lab.chaos.peers.approval_inbox import APPROVAL_WAIT, ask
from effectgate_lab.chaos.peers.provider_call import JsonDict, Providers
from effectgate_lab.chaos.peers.worker_http import announce, crash_point, parse

STEP = "provider_call"
PROVIDERS = Providers()
tool = restate.Service("ChaosTool")


@tool.handler("call")
async def call(ctx: restate.Context, request: JsonDict) -> JsonDict:
    if request.get("approval"):
        awakeable, approved = ctx.awakeable(type_hint=str)
        await ctx.run_typed("ask for approval", ask, url=request["approval"], action=request["action"], token=awakeable)
        wait = ctx.sleep(timedelta(seconds=APPROVAL_WAIT))
        match await restate.select(approved=approved, timeout=wait):
            case ["timeout", _]:
                return {"told": "failure", "detail": "approval timed out"}
    key = f"{ctx.request().id}-{STEP}"

    async def provider_call() -> JsonDict:
        answer = await PROVIDERS.call(request, key)
        crash_point()
        return answer

    return await ctx.run_typed(STEP, provider_call)


async def listening(port: int, server: asyncio.Future[None]) -> None:
    """Returns once the port takes connections (the harness registers the worker right after)."""
    while not server.done():
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    server.result()  # it failed to start: raise why


async def run(port: int, fd: int = -1) -> None:
    config = Config()
    # fd: the supervisor's socket, already bound and listening on `port`.
    config.bind = [f"fd://{fd}" if fd >= 0 else f"127.0.0.1:{port}"]
    config.h2_max_concurrent_streams = 2**31 - 1  # as the SDK's own test harness serves it
    config.keep_alive_timeout = 2**31 - 1
    config.accesslog = None
    config.errorlog = None
    app = restate.app(services=[tool])
    server = asyncio.ensure_future(serve(app, config, mode="asgi"))
    await listening(port, server)
    announce(port)
    try:
        await server
    finally:
        await PROVIDERS.close()


def main() -> None:
    args = parse("restate_worker")
    asyncio.run(run(args.port, args.fd))


if __name__ == "__main__":
    main()
