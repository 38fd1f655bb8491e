"""A configured tool: its policy, its adapter, and how its payload is parsed and normalised."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from effectgate.adapters.base import ActionCall, Adapter, InvalidPayload
from effectgate.gateway.config import ToolConfig
from effectgate.gateway.core.limits.policy import ToolPolicy
from effectgate.gateway.core.provider.lag import LagBook
from effectgate.gateway.model import ActionRecord, InvalidRequest, provider_key

# Fields masked by default, by payload type: what a person deciding never needs to read.
DEFAULT_SENSITIVE: Mapping[str, tuple[str, ...]] = {"effectgate.tools.v1.ChargeCard": ("payment_method",)}


@dataclass(frozen=True)
class BoundTool:
    config: ToolConfig
    adapter: Adapter
    # The learned read lags (`consistency_window = "auto"`); None: no learning in this process.
    lags: LagBook | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @functools.cached_property
    def policy_version(self) -> str:
        """The digest of the tool's policy as loaded (computed once: the claim records it)."""
        return self.config.policy_version

    @property
    def sensitive(self) -> tuple[str, ...]:
        """Payload fields masked for people: the tool's list, else its payload type's default."""
        if self.config.sensitive is not None:
            return self.config.sensitive
        return DEFAULT_SENSITIVE.get(self.payload_type_name, ())

    @property
    def payload_type_name(self) -> str:
        return self.adapter.payload_type.DESCRIPTOR.full_name

    @functools.cached_property
    def policy(self) -> ToolPolicy:
        """The tool's limits, compiled on first use (the server compiles every tool's at start-up,
        so a bad rule stops it there: `runtime/parts.bind_tools`)."""
        return ToolPolicy(self.name, self.config.limits, self.adapter.payload_type)

    @property
    def lag_key(self) -> str:
        return self.config.lag_key or self.config.adapter

    @property
    def consistency_window(self) -> float:
        configured = self.config.consistency_window
        declared = self.adapter.capabilities.consistency_window
        if configured == "auto":
            return self.lags.window(self.lag_key, declared) if self.lags is not None else declared
        return declared if configured is None else configured

    def action_call(self, record: ActionRecord, *, receipt: bool = True) -> ActionCall:
        """The action as the adapter sees it (`receipt=False`: as if the answer had been lost)."""
        return ActionCall(
            action_id=record.action_id,
            provider_key=provider_key(record.action_id, record.generation),
            payload=self.load(record.payload),
            scope=record.scope,
            tool=record.tool,
            tenant=record.tenant,
            attempt=record.attempts,
            receipt=record.receipt if receipt else None,
        )

    def parse(self, type_url: str, value: bytes) -> Message:
        """Unpacks an Any's content into the tool's message type (not yet normalised)."""
        got = type_url.rsplit("/", 1)[-1]
        if got != self.payload_type_name:
            raise InvalidRequest(
                [("payload", f"tool {self.name!r} takes {self.payload_type_name}, got {got or 'nothing'}")]
            )
        message = self.adapter.payload_type()
        try:
            message.ParseFromString(value)
        except DecodeError:
            raise InvalidRequest([("payload", f"not a valid {self.payload_type_name}")]) from None
        return message

    def normalize(self, payload: Message) -> Message:
        try:
            return self.adapter.normalize(payload)
        except InvalidPayload as exc:
            raise InvalidRequest([(f"payload.{exc.field}", exc.message)]) from None

    def load(self, payload: bytes) -> Message:
        """The stored (already normalised) payload of an action."""
        message = self.adapter.payload_type()
        message.ParseFromString(payload)
        return message


class ToolSet:
    """The tools of one gateway, by name."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)

    def __iter__(self) -> Iterator[BoundTool]:
        return iter(self._tools.values())

    def get(self, name: str) -> BoundTool:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise InvalidRequest([("tool", f"unknown tool {name!r} (configured: {known})")])
        return tool
