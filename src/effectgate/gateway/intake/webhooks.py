"""The webhook listener: `POST /webhooks/<adapter>` for every adapter that receives webhooks.

A delivery is verified by its adapter (`ReceivesWebhooks.parse_webhook`, the provider's own
signature scheme) and applied by `core.ProviderReports` (leased, one transition, each event id
once). Answers: 200 applied (or nothing to change), 400 refused (forged, stale, replayed,
malformed: a warning line and a counter, nothing changed), 404 no such route, 503 try again
(the action is being driven, or the store is down): providers retry non-2xx deliveries.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping

from effectgate.adapters.base import Adapter
from effectgate.adapters.capabilities import ReceivesWebhooks, WebhookRejected
from effectgate.gateway.config import TlsConfig, WebhooksSection
from effectgate.gateway.core import Busy, ProviderReports, Replayed
from effectgate.gateway.intake.http11 import HttpServer, Request, Response
from effectgate.gateway.model import GatewayUnavailable
from effectgate.gateway.observability import provider_metrics

log = logging.getLogger("effectgate.webhooks")
PREFIX = "/webhooks/"
RETRY_AFTER = "5"


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file:
        context.load_verify_locations(cafile=tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class WebhookIntake:
    def __init__(self, reports: ProviderReports, adapters: Mapping[str, Adapter], settings: WebhooksSection) -> None:
        self._reports = reports
        self._routes = {name: a for name, a in adapters.items() if isinstance(a, ReceivesWebhooks)}
        self._settings = settings
        tls = tls_context(settings.tls) if settings.tls is not None else None
        self._server = HttpServer(self.handle, max_body=settings.max_body_bytes, tls=tls)

    @property
    def routes(self) -> list[str]:
        return sorted(PREFIX + name for name in self._routes)

    async def start(self) -> int:
        host, _, port = self._settings.listen.rpartition(":")
        bound = await self._server.start(host.strip("[]"), int(port))
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
        try:
            event = await adapter.parse_webhook(request.body, request.headers)
        except WebhookRejected as exc:
            return self._refused(name, exc.reason, exc.message)
        try:
            applied = await self._reports.apply(name, adapter, event)
        except Replayed:
            return self._refused(name, "replayed", f"event {event.event_id} was applied before")
        except (Busy, GatewayUnavailable):
            provider_metrics.webhook(name, "busy")
            return Response(503, {"error": "try again later"}, {"Retry-After": RETRY_AFTER})
        provider_metrics.webhook(name, applied.value)
        if not event.kind.settles and applied.value == "noted":
            provider_metrics.provider_event(name, event.kind.value)
        return Response(200, {"outcome": applied.value, "event": event.event_id})

    @staticmethod
    def _refused(name: str, reason: str, message: str) -> Response:
        log.warning("webhook refused on %s%s: %s (%s); nothing changed", PREFIX, name, reason, message)
        provider_metrics.webhook(name, reason)
        return Response(400, {"error": reason})
