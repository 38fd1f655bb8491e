"""The study's setting replayed through an MCP upstream: `mcp_create_issue`.

The provider is the lab's issue tracker MCP server (effectgate_lab.mcp_upstream, streamable HTTP
on loopback): `create_issue` takes no key and creates an issue on every call, as the published
servers do on retries; `list_issues` is the read. An agent without effectgate calls the tool over
MCP itself (the `mcp` SDK's client, one session per call, as an MCP host that reconnects after a
failure); effectgate reaches the same server through its `mcp` adapter.

The episode's seeded `FaultPlan` is mapped, one decision per fresh write, onto the faults the
upstream simulator has (`MCP_FAULTS`). What it cannot express (docs/chaos.md): a half-done write
that finishes later (its partial issue never gets its labels), a lost answer whose issue the list
does not show yet (`drop_delayed` becomes a plain lost answer), a 409 (a conflict becomes an
`isError` that applied nothing) and a 500 after the effect (`error_after_commit`: no such fault).
"""

from __future__ import annotations

from typing import Any

import httpx
from google.protobuf.message import Message
from mcp.shared.exceptions import MCPError

from effectgate.adapters.mcp.connection import Lost, NoAnswer, NotSent, Session
from effectgate_lab.chaos.model import HTTP_TIMEOUT, Truth
from effectgate_lab.chaos.scenarios import SECRET, SECRET_ENV, Check, JsonDict, Provider, Reply, Scenario, struct
from effectgate_lab.mcp_upstream.http import McpHttpSimulator
from effectgate_lab.mcp_upstream.ledger import FaultScript
from effectgate_lab.simulators.faults import Fault, FaultInjector, FaultPlan

# The study's faults (and the harness's conditions) as the upstream simulator commits them.
MCP_FAULTS: dict[Fault, str] = {
    Fault.DROP_AFTER_COMMIT: "drop_after_commit",  # applied, the connection cut with no answer
    Fault.DROP_DELAYED: "drop_after_commit",  # the same: the list shows it at once
    Fault.DELAYED_VISIBILITY: "delayed_visibility",  # applied, listed only after the lag
    Fault.PARTIAL: "partial",  # created without its labels, for good
    Fault.CONFLICT: "error_no_effect",  # an isError that applied nothing
    Fault.RATE_LIMIT: "rate_limit",
    Fault.DROP_BEFORE_COMMIT: "restart",  # the server goes away with the call, nothing applied
    Fault.SLOW: "slow",
    Fault.LANDS_LATE: "lands_late",  # applied after the caller gave up, whatever it does
}
# The tool's isError codes, as HTTP statuses the methods already read: a refusal to retry later,
# a rate limit, a definitive refusal (an empty title).
# How long a call may take, and a session may take to open, for the direct agent's host and
# effectgate's adapter alike: an MCP call (JSON-RPC over an event stream, a session to open first)
# costs several times a REST one, and on a loaded machine the REST providers' 2 s is too short.
MCP_TIMEOUT = 2 * HTTP_TIMEOUT
CONNECT_TIMEOUT = MCP_TIMEOUT
# The agents' MCP host sessions, by the server's URL (a method reaches the provider by its URL).
HOSTS: dict[str, Session] = {}
ERROR_STATUS = {"unavailable": 503, "rate_limited": 429, "invalid_title": 422, "unauthorized": 401}


class MappedFaults(FaultScript):
    """The upstream's fault source: each fresh write takes the next decision of the injector (a
    scripted first fault, then the seeded plan), under the simulator's name for it."""

    def __init__(self, injector: FaultInjector) -> None:
        super().__init__()
        self.injector = injector

    def next(self) -> str | None:
        fault = self.injector.decide()
        if fault is None:
            return None
        if fault not in MCP_FAULTS:
            raise ValueError(f"the MCP upstream cannot commit {fault.value!r}")
        return MCP_FAULTS[fault]


class McpProvider:
    """One tracker MCP server of one episode, with the harness's injector as its fault source."""

    def __init__(self, plan: FaultPlan, lag: float) -> None:
        unmapped = [f.value for f in Fault if plan.probability(f) and f not in MCP_FAULTS]
        if unmapped:
            raise ValueError(f"the MCP upstream cannot commit {', '.join(unmapped)}")
        self.injector = FaultInjector(plan)
        self.server = McpHttpSimulator(
            "tracker",
            token=SECRET,
            list_lag=0.0,  # as the CRM's reads: immediate, unless the write's fault delays it
            visibility_lag=lag,
            slow_seconds=plan.slow_seconds,
            faults=MappedFaults(self.injector),
        )
        self.base_url = ""
        self.host: Session | None = None

    async def start(self) -> str:
        await self.server.start()
        self.base_url = self.server.url
        # The agent's MCP host: one session with the server, opened again when it breaks.
        auth = {"Authorization": f"Bearer {SECRET}"}
        self.host = Session(url=self.base_url, headers=auth, connect_timeout=CONNECT_TIMEOUT)
        HOSTS[self.base_url] = self.host
        return self.base_url

    async def stop(self) -> None:
        if self.host is not None:
            HOSTS.pop(self.base_url, None)
            await self.host.close()
        await self.server.close()


async def call_tool(url: str, tool: str, arguments: JsonDict) -> Reply:
    """One `tools/call` on the host's session with the episode's server; no answer (no session, a
    cut connection, a restart, nothing within MCP_TIMEOUT) is `Reply(None)`, a JSON-RPC error a
    400, an `isError` result its code's status."""
    host = HOSTS.get(url)
    if host is None:
        return Reply(None)
    try:
        result = await host.request(lambda c: c.call_tool(tool, arguments), timeout=MCP_TIMEOUT)
    except MCPError as err:  # the server refused the call before running it
        return Reply(400, {"error": str(err)})
    except (NotSent, Lost, NoAnswer):
        return Reply(None)
    body = result.structured_content or {}
    if result.is_error:
        return Reply(ERROR_STATUS.get(str(body.get("error")), 500), body)
    return Reply(200, body)


def _url(client: httpx.AsyncClient) -> str:
    return str(client.base_url).rstrip("/")


class McpCreateIssue(Scenario):
    name = "mcp_create_issue"
    tool_kind = "mcp"
    call_timeout = MCP_TIMEOUT

    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider:
        return McpProvider(plan, lag)  # a partial issue never finishes: `settle` has no say

    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        title = f"Order {seed} arrived damaged"
        if paraphrased:  # the same issue, spaced and cased differently
            return {"title": f" {title} ", "body": f"Customer {seed} reports a damaged parcel.", "labels": ["Bug"]}
        return {"title": title, "body": f"Customer {seed} reports a damaged parcel.", "labels": ["bug"]}

    def typed(self, args: JsonDict) -> JsonDict:
        labels = sorted({str(x).lower() for x in args["labels"]} | {"customer"})
        return {"title": args["title"].strip(), "body": args["body"], "labels": labels}

    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        # The tracker takes no key: the tag rides in the body, where the wrapper's read finds it.
        arguments = {**typed, "body": f"{typed['body']}\n\n[chaos:{tag}]"}
        return await call_tool(_url(client), "create_issue", arguments)

    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        reply = await call_tool(_url(client), "list_issues", {"query": f"[chaos:{tag}]"})
        issues = reply.body.get("issues") if isinstance(reply.body, dict) else None
        if reply.status != 200 or not isinstance(issues, list):
            return Check.UNKNOWN
        return Check.TRUE if any(i.get("labels") == typed["labels"] for i in issues) else Check.FALSE

    def half_done(self, reply: Reply) -> bool:
        return isinstance(reply.body, dict) and reply.body.get("labels") == []

    def adapter(self, base_url: str, window: float) -> JsonDict:
        return {
            "kind": "mcp",
            "url": base_url,
            "token_env": SECRET_ENV,
            "tool": "create_issue",
            # No key upstream: the action id rides in the body, so the read finds this action's issue.
            "arguments": {"title": "{title}", "body": "{body}\n\n[effectgate:{action_id}]", "labels": "{labels}"},
            "verify": {
                "tool": "list_issues",
                "arguments": {"query": "[effectgate:{action_id}]"},
                "receipt_id": "result.issues[0].id",
            },
            "match": "size(result.issues) == 1 && result.issues[0].labels == payload.labels",
            "absent": "size(result.issues) == 0",
            # The tracker documents these errors as "nothing was applied".
            "no_effect_when": 'result.error in ["unavailable", "rate_limited"]',
            "retry_after": "result.retry_after",
            "refused_when": 'result.error == "invalid_title"',
            "success_when": "result.labels == payload.labels",
            "timeout": MCP_TIMEOUT,
            "connect_timeout": CONNECT_TIMEOUT,
            "consistency_window": window,
        }

    def payload(self, typed: JsonDict) -> Message:
        return struct(typed)

    def scope(self, typed: JsonDict) -> str:
        return "issue:" + "-".join(typed["title"].lower().split())

    def truth(self, sim: Provider) -> Truth:
        assert isinstance(sim, McpProvider)
        effects: list[dict[str, Any]] = sim.server.effects()
        return Truth(len(effects), sum(1 for e in effects if e.get("labels")))
