"""The `[adapters.NAME]` table of the generic HTTP adapter (`kind = "http"`), as a typed model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from effectgate.adapters.base import KEEPS_PROCESSING, ConfigError
from effectgate.adapters.http import template as tpl
from effectgate.adapters.http.template import Postcondition
from effectgate.adapters.http.webhooks import WebhookSpec
from effectgate.adapters.settings import AdapterSettings

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
CONTEXT_NAMES = frozenset({"action_id", "provider_key", "scope", "tool", "tenant"})


class RequestSpec(AdapterSettings):
    """One request: method (POST by default; GET for `verify`), URL template (relative to
    `base_url`) and optional JSON body template."""

    method: Method = "POST"
    url: str
    body: Any = None

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _templates(self) -> RequestSpec:
        try:
            tpl.names(self.url)
            tpl.names_in(self.body)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def names(self) -> set[str]:
        return tpl.names(self.url) | tpl.names_in(self.body)


class VerifySpec(RequestSpec):
    """The read-back request, plus where the provider's id is in *its* answer: a list-shaped read
    (`{"data": [...]}`) holds it elsewhere than the create answer (`receipt_id = "data.0.id"`),
    and a receipt is the provider's id however the action was confirmed. "" (the default) reads
    the table's own `receipt_id` path."""

    receipt_id: str = ""


class HttpSettings(AdapterSettings):
    base_url: str = ""
    request: RequestSpec
    # The read-back: GET or HEAD only (a verification must not write). For HEAD the document the
    # postconditions see is {"status": <code>, "headers": {<lower-case name>: <value>}}.
    verify: VerifySpec | None = None
    expect: list[Postcondition] = Field(default_factory=list)
    response_expect: list[Postcondition] = Field(default_factory=list)
    # Proof of absence. There is no default: without one of these, verify never answers
    # NOT_FOUND, and a lost answer stays UNKNOWN for an operator (a 404 from a mistyped verify
    # URL must not read as "never happened" and cause a second write).
    absent_statuses: list[int] = Field(default_factory=list)
    absent_when: list[Postcondition] = Field(default_factory=list)
    definitive_statuses: list[int] = Field(default_factory=lambda: [400, 404, 422])
    idempotency_header: str = ""
    # `effectgate check --probe`: a GET of this path (relative to base_url) must answer 2xx.
    probe_path: str = ""
    dedups_on_key: bool = False
    key_retention: float | None = Field(default=None, gt=0)
    consistency_window: float = Field(default=30.0, ge=0)
    # How long the API may still apply a request after our call to it ended (Capabilities).
    keeps_processing: float = Field(default=KEEPS_PROCESSING, ge=0)
    timeout: float = Field(default=30.0, gt=0)
    token_env: str | None = None
    token_file: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    receipt_id: str = "id"
    headers: dict[str, str] = Field(default_factory=dict)
    # Signed webhooks from the provider (http/webhooks.py); None: this adapter takes none.
    webhook: WebhookSpec | None = None

    @field_validator("verify", mode="before")
    @classmethod
    def _get_by_default(cls, verify: Any) -> Any:
        if isinstance(verify, dict) and "method" not in verify:
            return {**verify, "method": "GET"}
        return verify

    @field_validator("verify")
    @classmethod
    def _read_only(cls, verify: VerifySpec | None) -> VerifySpec | None:
        if verify is not None:
            if verify.method not in ("GET", "HEAD"):
                raise ValueError(f"verify must be a GET or HEAD (a read), not {verify.method}")
            if verify.body is not None:
                raise ValueError("verify is a read: it takes no body")
        return verify

    @field_validator("absent_statuses", "definitive_statuses")
    @classmethod
    def _statuses(cls, statuses: list[int]) -> list[int]:
        bad = [s for s in statuses if not 100 <= s <= 599]
        if bad:
            raise ValueError(f"{bad} are not HTTP statuses")
        return statuses

    @model_validator(mode="after")
    def _consistent(self) -> HttpSettings:
        if self.verify is None:
            given = [k for k in ("expect", "absent_when", "absent_statuses") if getattr(self, k)]
            if given:
                raise ValueError(f"{', '.join(given)} without `verify`: there is no read to apply them to")
        elif not self.expect:
            raise ValueError("`verify` needs at least one `expect` postcondition")
        ok_absent = [s for s in self.absent_statuses if 200 <= s < 300]
        if ok_absent:
            raise ValueError(f"absent_statuses {ok_absent}: a success status cannot prove absence")
        if self.dedups_on_key and not self.idempotency_header:
            raise ValueError("dedups_on_key needs an idempotency_header")
        return self

    def read_receipt_id(self) -> str:
        """The JSON path of the provider's id in the read-back's answer."""
        return (self.verify.receipt_id if self.verify else "") or self.receipt_id

    def conditions(self) -> list[Postcondition]:
        return [*self.expect, *self.response_expect, *self.absent_when]

    def payload_fields(self) -> set[str]:
        """The payload fields the templates use (every one must be in the payload)."""
        used = self.request.names() | (self.verify.names() if self.verify else set())
        return used.union(*(c.names() for c in self.conditions())) - CONTEXT_NAMES

    def path_fields(self) -> set[str]:
        """The names used in URL paths (their values must not be empty, `.` or `..`)."""
        urls = [self.request.url] + ([self.verify.url] if self.verify else [])
        return set().union(*(tpl.path_names(u) for u in urls))
