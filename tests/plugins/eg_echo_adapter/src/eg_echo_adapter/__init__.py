"""A toy adapter shipped as its own package: its "provider" is an in-process dict of effects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from effectgate.adapters.base import ActionCall, Adapter, Capabilities, Observation, Outcome, Receipt


class EchoAdapter(Adapter):
    payload_type: ClassVar[type[Message]] = struct_pb2.Struct

    def __init__(self, name: str) -> None:
        self.name = name
        # provider key -> echoed payload; the provider dedups on the key.
        self.effects: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> EchoAdapter:
        return cls(name)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(dedups_on_key=True, key_retention=None, consistency_window=0.0, has_read_api=True)

    async def execute(self, call: ActionCall) -> Receipt:
        echoed = self.effects.setdefault(call.provider_key, json_format.MessageToDict(call.payload))
        return Receipt(external_id=call.provider_key, result=echoed)

    async def verify(self, call: ActionCall) -> Observation:
        if call.provider_key not in self.effects:
            return Observation(Outcome.NOT_FOUND, detail="never echoed")
        receipt = Receipt(external_id=call.provider_key, result=self.effects[call.provider_key])
        return Observation(Outcome.CONFIRMED, detail="echoed", receipt=receipt)
