"""A configured tool: its policy, its adapter, and how its payload is parsed and normalised."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from effectgate.adapters.base import ActionCall, Adapter, InvalidPayload
from effectgate.gateway.config import OnRepeat, ToolConfig
from effectgate.gateway.core.limits.policy import ToolPolicy
from effectgate.gateway.core.provider.lag import LagBook
from effectgate.gateway.model import IN_DOUBT, ActionRecord, InvalidRequest, provider_key

# Fields masked by default, by payload type: what a person deciding never needs to read.
DEFAULT_SENSITIVE: Mapping[str, tuple[str, ...]] = {"effectgate.tools.v1.ChargeCard": ("payment_method",)}


@dataclass(frozen=True)
class BoundTool:
    config: ToolConfig
    adapter: Adapter
    # The learned read lags (`consistency_window = "auto"`); None: no learning in this process.
    lags: LagBook | None = None
    # Where the adapter's credentials are set (`[adapters.stripe] api_key_env = "STRIPE_API_KEY"`),
    # for the message of a refused key; "" when unknown.
    credentials: str = ""

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
        so a bad rule stops it there: `runtime/configured.bind_tools`)."""
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

    @property
    def keeps_processing(self) -> float:
        configured = self.config.keeps_processing
        return self.adapter.capabilities.keeps_processing if configured is None else configured

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
            generation=record.generation,
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


class DispatcherGone(Exception):
    """The adapter that dispatched an action's attempt in doubt is no longer configured: only it
    can read that attempt back, so the action stays in doubt and nothing is sent."""

    def __init__(self, record: ActionRecord, adapter: str) -> None:
        self.adapter = adapter
        self.reason = (
            f"adapter {adapter!r}, which dispatched this attempt, is no longer configured: its provider "
            f"cannot be read, so the action stays in doubt and is not sent again (tool {record.tool!r} "
            f"now uses another adapter); configure [adapters.{adapter}] again, or reconcile the action by hand"
        )
        super().__init__(self.reason)


class ToolSet:
    """The tools of one gateway, by name, and the adapters configured (to read an action back
    through the adapter that dispatched it)."""

    def __init__(self, tools: Mapping[str, BoundTool], adapters: Mapping[str, Adapter] | None = None) -> None:
        self._tools = dict(tools)
        # The tools whose repeats are answered with the first outcome (a replay's fast test).
        self.coalescing = frozenset(name for name, t in self._tools.items() if t.config.on_repeat is OnRepeat.COALESCE)
        by_tool = {t.config.adapter: t.adapter for t in tools.values()}
        self._adapters = dict(adapters) if adapters is not None else by_tool

    def __iter__(self) -> Iterator[BoundTool]:
        return iter(self._tools.values())

    def get(self, name: str) -> BoundTool:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise InvalidRequest([("tool", f"unknown tool {name!r} (configured: {known})")])
        return tool

    def driving(self, record: ActionRecord) -> BoundTool:
        """The tool as it must drive `record`. While the current attempt is in doubt (DISPATCHED,
        UNKNOWN), its read-back and any same-key retry go through the adapter that dispatched it
        (`record.adapter`), even when the tool has been moved to another adapter since: only that
        provider can show the attempt, and "absent" at another provider proves nothing (a re-send
        there would be a second charge). Raises `DispatcherGone` when that adapter is no longer
        configured. Otherwise (nothing of the attempt can be at a provider) the tool as configured."""
        tool = self.get(record.tool)
        sender = record.adapter
        if record.state not in IN_DOUBT or not sender or sender == tool.config.adapter:
            return tool
        adapter = self._adapters.get(sender)
        if adapter is None:
            raise DispatcherGone(record, sender)
        config = tool.config.model_copy(update={"adapter": sender})
        return dataclasses.replace(tool, config=config, adapter=adapter, credentials="")
