"""The create (the hot path: one per new action) on the SDK's own aiohttp session and with the
SDK's own request and answer handling, without the SDK's per-request machinery.

What stays the SDK's: the headers (built by its requestor, once, as it builds them for every
request; only the idempotency key changes), the form encoding (`_api_encode`, exactly as the
requestor encodes), the session (its connection pool, TLS context with Stripe's CA bundle and
timeout), the connection errors (`AIOHTTPClient._handle_request_error`: the same
`APIConnectionError`, its cause chained) and the answer's interpretation (`_interpret_response`:
the same `StripeResponse`, the same error classes from the same bodies), so `errors.classify`
maps every failure as before. What is skipped, measured at 250-300 us of CPU per create
(docs/benchmarks.md): building the options and headers again for each request, the SDK's log
lines (formatted even when logging is off), its retry loop (off here: the gateway owns retries,
with the same key) and its telemetry bookkeeping (off).

`tests/test_stripe_create.py` holds the two paths to the same request on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import stripe
from stripe._api_requestor import _APIRequestor
from stripe._encode import _api_encode
from stripe._request_options import merge_options
from stripe._stripe_response import StripeResponse

PATH = "/v1/payment_intents"
_KEY = "Idempotency-Key"


class Create:
    """`await Create(...)(key, params)`: POST /v1/payment_intents, as `raw_request_async` does."""

    def __init__(self, client: stripe.StripeClient, http: stripe.AIOHTTPClient) -> None:
        requestor: _APIRequestor = client._requestor
        self._requestor = requestor
        self._http = http
        self._url = f"{requestor.base_addresses.get('api')}{PATH}"
        options = merge_options(requestor._options, {"idempotency_key": "-"})
        self._headers: dict[str, str] = requestor.request_headers("post", "V1", options)

    def encode(self, params: Mapping[str, Any]) -> str:
        # The requestor's own encoding, brackets left readable as it leaves them.
        return urlencode(list(_api_encode(params))).replace("%5B", "[").replace("%5D", "]")

    def headers(self, idempotency_key: str) -> dict[str, str]:
        return {**self._headers, _KEY: idempotency_key}

    async def __call__(self, idempotency_key: str, params: Mapping[str, Any]) -> StripeResponse:
        http = self._http
        try:
            answer = await http._session.request(
                "post",
                self._url,
                headers=self.headers(idempotency_key),
                data=self.encode(params),
                timeout=http._timeout,
            )
        except Exception as exc:
            http._handle_request_error(exc)
        # Read in full (back to the pool for the next request); a timeout or a broken connection
        # while reading is raised as is, like the SDK's client raises it.
        body = await answer.read()
        return self._requestor._interpret_response(body, answer.status, answer.headers, "V1")
