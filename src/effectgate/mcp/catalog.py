"""Which tools the MCP front door exposes, read from the gateway's own TOML file.

Only what the front door needs is read, tolerantly: each `[tools.NAME]` table's `adapter`,
`on_repeat`, `approval` and `approval_ttl`; each `[adapters.NAME]` table's `kind` (it defaults to NAME); and the
front door's own optional `[mcp]` table:

    [mcp]
    allow_fresh_for_harmless = false   # see FrontDoorSettings
    [mcp.tools.open_ticket]            # per tool, all optional
    description = "Open a support ticket"
    input_schema_file = "schemas/open_ticket.json"   # required for google.protobuf.Struct tools

Everything else in the file belongs to the gateway and is ignored here.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from effectgate.tools.v1 import tools_pb2

# The built-in adapters' payloads, so the front door need not import provider SDKs.
BUILTIN_PAYLOADS: dict[str, type[Message]] = {
    "stripe": tools_pb2.ChargeCard,
    "postmark": tools_pb2.SendEmail,
    "smtp": tools_pb2.SendEmail,
    "http": struct_pb2.Struct,
    # An upstream MCP server: the schema comes from its tools/list (see `upstream`).
    "mcp": struct_pb2.Struct,
}


class CatalogError(ValueError):
    """The config cannot describe a tool for MCP; the message names the key."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    payload_type: type[Message]
    on_repeat: str = "coalesce"
    approval: str = "none"
    # How long an approval may take before the action expires (as written in the config; "").
    approval_ttl: str = ""
    description: str = ""
    # A JSON Schema declared in [mcp.tools.NAME]; required for Struct payloads.
    input_schema: Mapping[str, Any] | None = None
    # For an adapter of kind "mcp": its [adapters.NAME] table, to read the schema upstream.
    upstream: Mapping[str, Any] | None = None

    @property
    def harmless(self) -> bool:
        """`on_repeat = "allow"`: the operator declared repeats harmless (no dedup)."""
        return self.on_repeat == "allow"


@dataclass(frozen=True)
class Catalog:
    tools: Mapping[str, ToolSpec]
    allow_fresh_for_harmless: bool = False


def payload_for_kind(kind: str) -> type[Message]:
    if kind in BUILTIN_PAYLOADS:
        return BUILTIN_PAYLOADS[kind]
    for ep in entry_points(group="effectgate.adapters"):
        if ep.name == kind:
            payload: type[Message] = ep.load().payload_type
            return payload
    raise CatalogError(f"adapter kind {kind!r} is neither built in nor installed")


def _schema(name: str, table: Mapping[str, Any], base: Path) -> Mapping[str, Any] | None:
    if "input_schema" in table:
        inline = table["input_schema"]
        if not isinstance(inline, Mapping):
            raise CatalogError(f"mcp.tools.{name}.input_schema must be a table")
        return dict(inline)
    path = table.get("input_schema_file")
    if not path:
        return None
    file = Path(str(path))
    try:
        loaded = json.loads((file if file.is_absolute() else base / file).read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"mcp.tools.{name}.input_schema_file: {exc}") from None
    if not isinstance(loaded, dict) or loaded.get("type") != "object":
        raise CatalogError(f"mcp.tools.{name}.input_schema_file: the schema must be a JSON object of type 'object'")
    return loaded


def parse_catalog(doc: Mapping[str, Any], base: Path = Path(".")) -> Catalog:
    adapters = doc.get("adapters", {})
    mcp = doc.get("mcp", {})
    per_tool = mcp.get("tools", {})
    tools: dict[str, ToolSpec] = {}
    for name, table in doc.get("tools", {}).items():
        adapter = str(table.get("adapter", ""))
        if adapter not in adapters:
            raise CatalogError(f"tools.{name}.adapter: {adapter!r} is not an [adapters.*] table")
        kind = str(adapters[adapter].get("kind") or adapter)
        extra = per_tool.get(name, {})
        spec = ToolSpec(
            name=str(name),
            payload_type=payload_for_kind(kind),
            on_repeat=str(table.get("on_repeat", "coalesce")),
            approval=str(table.get("approval", "none")),
            approval_ttl=str(table.get("approval_ttl", "")),
            description=str(extra.get("description", "")),
            input_schema=_schema(name, extra, base),
            upstream=dict(adapters[adapter]) if kind == "mcp" else None,
        )
        if spec.payload_type is struct_pb2.Struct and spec.input_schema is None and spec.upstream is None:
            raise CatalogError(
                f"tools.{name} takes a google.protobuf.Struct: declare its arguments in "
                f"[mcp.tools.{name}] input_schema_file (a JSON Schema) to expose it over MCP"
            )
        tools[spec.name] = spec
    unknown = set(per_tool) - set(tools)
    if unknown:
        raise CatalogError(f"mcp.tools: {sorted(unknown)} are not [tools.*] tables")
    return Catalog(tools=tools, allow_fresh_for_harmless=bool(mcp.get("allow_fresh_for_harmless", False)))


def load_catalog(path: str | Path) -> Catalog:
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: {exc}") from None
    return parse_catalog(doc, Path(path).resolve().parent)


def needs_upstream(catalog: Catalog) -> bool:
    """Some tool's schema must be read from its upstream MCP server (`upstream.with_upstream_schemas`)."""
    return any(t.upstream is not None and t.input_schema is None for t in catalog.tools.values())
