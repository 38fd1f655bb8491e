"""The `[adapters.NAME]` table of the `mcp` adapter (`kind = "mcp"`), as a typed model.

[adapters.mail]
kind = "mcp"
url = "https://mail.example/mcp"          # streamable HTTP, or:
# command = ["mail-mcp-server", "--stdio"]  # a stdio server the gateway launches
token_env = "MAIL_MCP_TOKEN"              # HTTP: `Authorization: Bearer …`; stdio: $MCP_TOKEN
tool = "send_message"
key_argument = "idempotency_key"          # or key_meta = "io.example/idempotency-key"
verify = { tool = "list_messages", arguments = { idempotency_key = "{provider_key}" } }
match = "result.messages.exists(m, m.idempotency_key == action.provider_key)"
absent = "size(result.messages) == 0"
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from effectgate.adapters.mcp import rules
from effectgate.adapters.settings import AdapterSettings

CONTEXT_NAMES = frozenset({"action_id", "provider_key", "scope", "tool", "tenant"})


def _rule(value: str | None) -> str | None:
    if value is not None:
        try:
            rules.Rule(value)
        except rules.RuleError as exc:
            raise ValueError(str(exc)) from None
    return value


class ReadSpec(AdapterSettings):
    """The read tool that proves an effect (it must not write), with templated arguments."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    # CEL over the read's result: the external id of the effect found (default: the action id).
    receipt_id: str | None = None

    @field_validator("receipt_id")
    @classmethod
    def _rule(cls, value: str | None) -> str | None:
        return _rule(value)

    @field_validator("arguments")
    @classmethod
    def _templates(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            rules.names(value)
        except rules.RuleError as exc:
            raise ValueError(str(exc)) from None
        return value


class McpSettings(AdapterSettings):
    # Where the upstream is: one of the two.
    url: str = ""
    command: list[str] = Field(default_factory=list)
    # stdio: extra environment of the launched server (values are not secrets).
    env: dict[str, str] = Field(default_factory=dict)
    # HTTP: static headers (not secrets); the token goes into `auth_header`.
    headers: dict[str, str] = Field(default_factory=dict)
    token_env: str | None = None
    token_file: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    # stdio: the variable of the launched server's environment that receives the token.
    token_variable: str = "MCP_TOKEN"
    # The upstream tool this adapter's tool calls.
    tool: str = Field(min_length=1)
    # Arguments sent (default: the payload as it is); placeholders over payload and action.
    arguments: dict[str, Any] | None = None
    # Where the gateway's idempotency key goes, if the upstream takes one.
    key_argument: str = ""
    key_meta: str = ""
    dedups_on_key: bool | None = None  # default: true when the key goes somewhere
    key_retention: float = Field(default=86400.0, gt=0)
    consistency_window: float = Field(default=5.0, ge=0)
    # Seconds one tools/call may take before its outcome is ambiguous.
    timeout: float = Field(default=10.0, gt=0)
    # Seconds to have a session, counting the wait behind another caller opening one (a failure
    # here sent nothing). Keep it below the tools' attempt_timeout, which would cut the call first.
    connect_timeout: float = Field(default=5.0, gt=0)
    # isError results: `no_effect_when` (checked first) marks a refusal to retry later (auth, rate
    # limit), `refused_when` a definitive refusal; any other isError is ambiguous.
    no_effect_when: str | None = None
    refused_when: str | None = "true"
    retry_after: str | None = None  # for a no-effect refusal: seconds to wait, e.g. "result.retry_after"
    # A success whose result this does not satisfy is a partial effect (ambiguous).
    success_when: str | None = None
    receipt_id: str | None = None  # CEL over the write's (or the read's) result: the external id
    verify: ReadSpec | None = None
    match: str | None = None
    absent: str | None = None

    @field_validator("no_effect_when", "refused_when", "retry_after", "success_when", "receipt_id", "match", "absent")
    @classmethod
    def _rules(cls, value: str | None) -> str | None:
        return _rule(value)

    @field_validator("arguments")
    @classmethod
    def _templates(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            rules.names(value)
        except rules.RuleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> McpSettings:
        if bool(self.url) == bool(self.command):
            raise ValueError("give exactly one of `url` (streamable HTTP) and `command` (stdio)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must be an http(s) URL")
        if self.key_argument and self.key_meta:
            raise ValueError("give key_argument or key_meta, not both")
        if self.verify is not None and self.match is None:
            raise ValueError("a `verify` read needs a `match` rule (what proves the effect)")
        if self.verify is None and (self.match or self.absent):
            raise ValueError("`match` and `absent` need a `verify` read tool")
        return self

    @property
    def dedups(self) -> bool:
        if self.dedups_on_key is not None:
            return self.dedups_on_key
        return bool(self.key_argument or self.key_meta)
