"""JSON Schemas of the exposed tools: arguments from the payload's protobuf descriptor (or a schema
declared in config for Struct tools), results from the action, and the validation done before
anything reaches the gateway (the low-level MCP server validates nothing itself)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from jsonschema import Draft202012Validator

from effectgate.mcp.catalog import ToolSpec

_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"},
}
_INTEGERS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}

# What a descriptor cannot say (proto3 has no `required`): the built-in payloads' rules, the same
# the adapters enforce in `normalize`, so a model learns them from the schema, not from an error.
REFINEMENTS: dict[str, dict[str, Any]] = {
    "effectgate.tools.v1.ChargeCard": {
        "required": ["customer", "amount", "currency", "payment_method"],
        "properties": {
            "customer": {"minLength": 1, "description": "provider customer id, e.g. cus_42"},
            "amount": {"minimum": 1, "description": "amount in the currency's minor unit (cents)"},
            "currency": {"pattern": "^[A-Za-z]{3}$", "description": "ISO 4217 code, e.g. usd"},
            "payment_method": {"minLength": 1, "description": "provider payment method id"},
        },
    },
    "effectgate.tools.v1.SendEmail": {
        "required": ["to", "from", "subject"],
        "properties": {"to": {"minLength": 3}, "from": {"minLength": 3}, "subject": {"minLength": 1}},
    },
}


def _field_schema(field: FieldDescriptor, seen: tuple[str, ...]) -> dict[str, Any]:
    if field.type in _INTEGERS:
        item: dict[str, Any] = {"type": "integer"}
    elif field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        item = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        item = message_schema(field.message_type, seen)
    else:
        item = dict(_SCALARS[field.type])
    if field.is_repeated and not (field.message_type and field.message_type.GetOptions().map_entry):
        return {"type": "array", "items": item}
    return item


def message_schema(descriptor: Descriptor, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of a message's proto3 JSON form (field names as in the .proto)."""
    if descriptor.full_name == "google.protobuf.Struct" or descriptor.full_name in seen:
        return {"type": "object"}
    if descriptor.GetOptions().map_entry:
        return {"type": "object", "additionalProperties": _field_schema(descriptor.fields_by_name["value"], seen)}
    seen = (*seen, descriptor.full_name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: _field_schema(f, seen) for f in descriptor.fields},
        "additionalProperties": False,
    }
    refinement = REFINEMENTS.get(descriptor.full_name, {})
    for name, extra in refinement.get("properties", {}).items():
        schema["properties"][name].update(extra)
    if "required" in refinement:
        schema["required"] = list(refinement["required"])
    return schema


def input_schema(tool: ToolSpec) -> dict[str, Any]:
    if tool.input_schema is not None:
        return dict(tool.input_schema)
    return message_schema(cast(Descriptor, tool.payload_type.DESCRIPTOR))


# The structuredContent of every tool result (also of REJECTED/UNKNOWN ones, flagged isError).
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "state": {
            "type": "string",
            "enum": ["AWAITING_APPROVAL", "PLANNED", "DISPATCHED", "CONFIRMED", "REJECTED", "NOT_FOUND", "UNKNOWN"],
        },
        "action_id": {"type": "string"},
        "replayed": {"type": "boolean", "description": "true: the stored outcome, nothing was sent now"},
        "receipt": {
            "type": "object",
            "properties": {
                "external_id": {"type": "string"},
                "provider_request_id": {"type": "string"},
                "result": {"type": "object"},
            },
        },
        "reason": {"type": "string"},
        "next_step": {"type": "string"},
        "approval_ttl": {
            "type": "string",
            "description": "AWAITING_APPROVAL: how long a person may take before it expires (empty: never)",
        },
        "error": {
            "type": "object",
            "description": "set when the call did not produce an action result (isError: true)",
            "properties": {
                "reason": {"type": "string", "description": "e.g. PAYLOAD_MISMATCH, INVALID_ARGUMENTS, IN_FLIGHT"},
                "message": {"type": "string"},
                "retry_same_step": {"type": "boolean", "description": "true: call again in the same step later"},
            },
            "required": ["reason", "message", "retry_same_step"],
        },
    },
    # An action result, or an error (which names the action when the gateway did).
    "anyOf": [{"required": ["state", "action_id", "replayed"]}, {"required": ["error"]}],
}


class InvalidArguments(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ArgumentCheck:
    """Validates a tool's arguments and turns them into its payload message."""

    def __init__(self, tool: ToolSpec) -> None:
        self.tool = tool
        self.schema = input_schema(tool)
        Draft202012Validator.check_schema(self.schema)
        self._validator = Draft202012Validator(self.schema)

    def payload(self, arguments: Mapping[str, Any] | None) -> Message:
        args = dict(arguments or {})
        errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        if errors:
            raise InvalidArguments(
                [f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}" for e in errors]
            )
        message = self.tool.payload_type()
        try:
            json_format.ParseDict(args, message)
        except json_format.ParseError as exc:
            raise InvalidArguments([str(exc)]) from None
        return message
