"""A Postmark-style email API server: send, and search sent messages by metadata.

Endpoints (Postmark's JSON shapes, `X-Postmark-Server-Token` auth):

    POST /email                  {From, To, Subject, TextBody, Headers, Metadata, MessageStream}
    GET  /messages/outbound      ?count=&offset=&recipient=&metadata_<key>=<value>
                                 a message shows only `visibility_lag` after it was accepted

Like Postmark, there is NO idempotency key: every accepted POST is a new message, duplicates
included; the ledger counts them all.

Refusals: 401 (ErrorCode 10) for a bad token; 422 (ErrorCode 300) for a missing or malformed
sender/recipient; 422 (ErrorCode 406) for a recipient in `inactive_domain` (Postmark's
"inactive recipient"). None of them consume a fault.

Faults (see `faults.py`): `partial` accepts the message but leaves it `Queued` (never sent, or
with `settle_seconds` set, sent that much later); the answer says `"Message": "Queued"`, not `"OK"`.
`delayed_visibility` hides it from the search for the plan's `visibility_lag` (at least
`search_lag`). The injected `conflict` is a 409.

Ledger: `{"kind": "email", "id", "params": {from, to, subject}, "metadata", "status", "fault"}`.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from aiohttp import web

from effectgate_lab.simulators.faults import Fault, FaultPlan
from effectgate_lab.simulators.server import JsonDict, SimResponse, SimulatorServer

DEFAULT_SERVER_TOKEN = "postmark-sim-token"
_ADDRESS = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+$")
_ERROR_CODES = {"conflict": 409, "api_error": 500}


@dataclass
class _Sent:
    data: JsonDict
    visible_at: float
    # When a `Queued` message goes out (None: never).
    sends_at: float | None = None

    def view(self, now: float) -> JsonDict:
        if self.sends_at is not None and now >= self.sends_at:
            self.sends_at = None
            self.data["Status"] = "Sent"
        return self.data


class PostmarkSimulator(SimulatorServer):
    name: ClassVar[str] = "postmark"

    def __init__(
        self,
        *,
        server_token: str = DEFAULT_SERVER_TOKEN,
        search_lag: float = 0.0,
        inactive_domain: str = "inactive.test",
        faults: FaultPlan | None = None,
        visibility_lag: float = 5.0,
        latency: float = 0.0,
        settle_seconds: float | None = None,
    ) -> None:
        super().__init__(faults=faults, visibility_lag=visibility_lag, latency=latency)
        self.server_token = server_token
        self.settle_seconds = settle_seconds
        self.search_lag = search_lag
        self.inactive_domain = inactive_domain.lower()
        self.messages: list[_Sent] = []

    def reset_state(self) -> None:
        self.messages.clear()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/email", self._send)
        app.router.add_get("/messages/outbound", self._search)

    def error_response(self, status: int, code: str, message: str) -> SimResponse:
        return SimResponse(status, {"ErrorCode": _ERROR_CODES.get(code, status), "Message": message})

    def _authenticate(self, request: web.Request) -> SimResponse | None:
        if request.headers.get("X-Postmark-Server-Token") != self.server_token:
            return SimResponse(401, {"ErrorCode": 10, "Message": "Bad or missing Server API token."})
        return None

    def _validate(self, body: Any) -> SimResponse | None:
        if not isinstance(body, dict):
            return SimResponse(422, {"ErrorCode": 300, "Message": "Invalid email request."})
        for name in ("From", "To"):
            if not _ADDRESS.match(str(body.get(name, ""))):
                return SimResponse(422, {"ErrorCode": 300, "Message": f"Invalid '{name}' address."})
        if str(body["To"]).rpartition("@")[2].lower() == self.inactive_domain:
            message = "You tried to send to recipient(s) that have been marked as inactive."
            return SimResponse(422, {"ErrorCode": 406, "Message": message})
        if not isinstance(body.get("Metadata", {}), dict):
            return SimResponse(422, {"ErrorCode": 300, "Message": "Metadata must be an object."})
        return None

    async def _send(self, request: web.Request) -> web.StreamResponse:
        refused = self._authenticate(request)
        if refused is None:
            try:
                body = json.loads(await request.text())
            except ValueError:
                body = None
            refused = self._validate(body)
        if refused is not None:
            return self.render(refused)

        async def commit(fault: Fault | None) -> SimResponse:
            return self._commit(body, fault)

        return await self.write(request, commit)

    def _commit(self, body: JsonDict, fault: Fault | None) -> SimResponse:
        now = self.now()
        message_id = str(uuid.uuid4())
        status = "Queued" if fault is Fault.PARTIAL else "Sent"
        submitted = datetime.fromtimestamp(now, UTC).isoformat()
        data: JsonDict = {
            "MessageID": message_id,
            "From": body["From"],
            "To": [{"Email": body["To"], "Name": ""}],
            "Subject": str(body.get("Subject", "")),
            "Status": status,
            "ReceivedAt": submitted,
            "Metadata": {str(k): str(v) for k, v in body.get("Metadata", {}).items()},
            "Headers": list(body.get("Headers", [])),
            "MessageStream": str(body.get("MessageStream", "outbound")),
        }
        sends_at = None if status == "Sent" or self.settle_seconds is None else now + self.settle_seconds
        self.messages.append(_Sent(data, now + self.visibility_delay(fault, self.search_lag), sends_at))
        self.record(
            "email",
            {"from": body["From"], "to": body["To"], "subject": data["Subject"]},
            id=message_id,
            metadata=data["Metadata"],
            status=status,
            fault=fault.value if fault else None,
        )
        answer = {
            "To": body["To"],
            "SubmittedAt": submitted,
            "MessageID": message_id,
            "ErrorCode": 0,
            "Message": "Queued" if status == "Queued" else "OK",
        }
        return SimResponse(200, answer)

    async def _search(self, request: web.Request) -> web.StreamResponse:
        refused = self._authenticate(request)
        if refused is not None:
            return self.render(refused)
        query = request.query
        try:
            count, offset = int(query["count"]), int(query.get("offset", "0"))
        except (KeyError, ValueError):
            return self.render(SimResponse(422, {"ErrorCode": 300, "Message": "count and offset are required."}))
        wanted = {k[len("metadata_") :]: v for k, v in query.items() if k.startswith("metadata_")}
        recipient = query.get("recipient", "").lower()
        now = self.now()
        hits = [
            m.view(now)
            for m in self.messages
            if m.visible_at <= now
            and all(m.data["Metadata"].get(k) == v for k, v in wanted.items())
            and (not recipient or m.data["To"][0]["Email"].lower() == recipient)
        ]
        page = hits[offset : offset + min(count, 500)]
        return self.render(SimResponse(200, {"TotalCount": len(hits), "Messages": page}))
