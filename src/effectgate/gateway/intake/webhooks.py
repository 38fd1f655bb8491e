"""The webhook listener: `POST /webhooks/<adapter>` for every adapter that receives webhooks.

A delivery is verified by its adapter (`ReceivesWebhooks.parse_webhook`, the provider's own
signature scheme) and applied by `core.ProviderReports` (bound to the adapter that dispatched
the action and the tenants it serves, read back before it settles, each event id once). Answers:
200 applied or nothing to change (`settled`, `noted`, `ignored`, `unmatched`, `unconfirmed`,
`deferred`), 400 refused (forged, stale, replayed, malformed: a warning line and a counter,
nothing changed), 404 no such route, 503 with `Retry-After` (the action is being driven, the
store is down, anything failed while applying): providers retry non-2xx deliveries.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping

from effectgate.adapters.base import Adapter, AdapterError
from effectgate.adapters.capabilities import ProviderEvent, ReceivesWebhooks, WebhookRejected
from effectgate.gateway.config import Config, TlsConfig, WebhooksSection
from effectgate.gateway.core import AdapterTenants, Applied, Busy, ProviderReports, Replayed
from effectgate.gateway.intake.server import HttpServer, Request, Response
from effectgate.gateway.model import GatewayUnavailable
from effectgate.gateway.observability import provider_metrics
from effectgate.gateway.store import StoreError

log = logging.getLogger("effectgate.webhooks")
PREFIX = "/webhooks/"
RETRY_AFTER = "5"


def unchanged_because(applied: Applied, event: ProviderEvent) -> str:
    """Why a delivery answered 200 changed nothing ("" when it changed something): the answer
    says so, for whoever sent it by hand (`effectgate dev trigger webhook`) and reads it."""
    if applied is Applied.IGNORED:
        if event.kind.settles:
            return f"{event.action_id} is settled already: a {event.type} changes nothing"
        return f"{event.type} is not an event the gateway acts on"
    if applied is Applied.UNMATCHED:
        return "no action this adapter dispatched (for a tenant it serves) carries the event's action id"
    if applied is Applied.UNCONFIRMED:
        return "the read-back does not show what the event says: nothing changed"
    return ""


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file:
        context.load_verify_locations(cafile=tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def adapter_tenants(config: Config) -> AdapterTenants:
    """The tenants each adapter serves: a principal's tenant, for every tool it may call (all
    tools when its list is empty). No principals (development mode): any tenant."""
    if not config.principals:
        return AdapterTenants(None)
    served: dict[str, set[str]] = {}
    for principal in config.principals:
        for name in principal.tools or config.tools:
            tool = config.tools.get(name)
            if tool is not None:
                served.setdefault(tool.adapter, set()).add(principal.tenant)
    return AdapterTenants({adapter: frozenset(tenants) for adapter, tenants in served.items()})


# Failures while applying a report whose cause is known: one line, no traceback.
_KNOWN = (Busy, GatewayUnavailable, StoreError, AdapterError, TimeoutError, ConnectionError)


def _holds_nul(event: ProviderEvent) -> bool:
    """The event's own text (its detail is stored as JSON, which escapes a NUL)."""
    return any("\x00" in text for text in (event.event_id, event.type, event.action_id, event.object_id))


class WebhookIntake:
    def __init__(self, reports: ProviderReports, adapters: Mapping[str, Adapter], settings: WebhooksSection) -> None:
        self._reports = reports
        self._routes = {name: a for name, a in adapters.items() if isinstance(a, ReceivesWebhooks)}
        self._settings = settings
        tls = tls_context(settings.tls) if settings.tls is not None else None
        self._server = HttpServer(self.handle, max_body=settings.max_body_bytes, tls=tls)
        # (adapter, reason) of each refusal: the forgery watch of [[notify]] (must not block).
        self.on_refused: Callable[[str, str], None] | None = None

    @property
    def routes(self) -> list[str]:
        return sorted(PREFIX + name for name in self._routes)

    async def start(self, *, shared: bool = False) -> int:
        """`shared`: one of the workers of `serve --workers N`, whose parent holds the port."""
        host, _, port = self._settings.listen.rpartition(":")
        bound = await self._server.start(host.strip("[]"), int(port), shared=shared)
        log.info("webhooks listening on port %d (%s)", bound, ", ".join(self.routes) or "no adapter takes webhooks")
        return bound

    async def stop(self) -> None:
        await self._server.stop()

    async def handle(self, request: Request) -> Response:
        if not request.path.startswith(PREFIX):
            return Response(404, {"error": "not a webhook route"})
        name = request.path[len(PREFIX) :]
        adapter = self._routes.get(name)
        if adapter is None:
            return Response(404, {"error": f"no adapter {name!r} receives webhooks here"})
        if request.method != "POST":
            return Response(405, {"error": "POST only"}, {"Allow": "POST"})
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return self._refused(name, "malformed", f"content type {media or 'none'!r}, not application/json", 415)
        if not request.body.strip():
            return self._refused(name, "malformed", "empty body")
        try:
            event = await adapter.parse_webhook(request.body, request.headers)
        except WebhookRejected as exc:
            return self._refused(name, exc.reason, exc.message)
        except Exception as exc:  # a body no judge foresaw: refused, one line, never a 500
            return self._refused(name, "malformed", f"unreadable event ({type(exc).__name__})")
        if _holds_nul(event):
            # PostgreSQL text cannot keep a NUL (SQLite can): refused alike on both stores, and
            # for good, rather than a 503 the provider would retry for days.
            return self._refused(name, "malformed", "a NUL in the event's id, type or object")
        try:
            applied = await self._reports.apply(name, adapter, event)
        except Replayed:
            return self._refused(name, "replayed", f"event {event.event_id} was applied before")
        except Busy:
            provider_metrics.webhook(name, "busy")
            return Response(503, {"error": "try again later"}, {"Retry-After": RETRY_AFTER})
        except Exception as exc:  # the lease is released already (ProviderReports); the provider retries
            if isinstance(exc, _KNOWN):
                log.warning(
                    "webhook %s on %s%s not applied: %s: %s", event.event_id, PREFIX, name, type(exc).__name__, exc
                )
            else:
                log.exception("webhook %s on %s%s not applied", event.event_id, PREFIX, name)
            provider_metrics.webhook(name, "failed")
            return Response(503, {"error": "try again later"}, {"Retry-After": RETRY_AFTER})
        provider_metrics.webhook(name, applied.value)
        if not event.kind.settles and applied.value == "noted":
            provider_metrics.provider_event(name, event.kind.value)
        answer: dict[str, object] = {"outcome": applied.value, "event": event.event_id}
        why = unchanged_because(applied, event)
        return Response(200, answer | ({"reason": why} if why else {}))

    def _refused(self, name: str, reason: str, message: str, status: int = 400) -> Response:
        log.warning("webhook refused on %s%s: %s (%s); nothing changed", PREFIX, name, reason, message)
        provider_metrics.webhook(name, reason)
        if self.on_refused is not None:
            self.on_refused(name, reason)
        return Response(status, {"error": reason})
