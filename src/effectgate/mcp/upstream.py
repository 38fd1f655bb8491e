"""Input schemas of tools whose adapter is an upstream MCP server (`kind = "mcp"`), read from that
server's own `tools/list`, so the model sees the upstream's schema through the front door.

The front door talks to the gateway only over gRPC; the schema it needs lives at the upstream, so
it asks the upstream itself, once at start, with the same `[adapters.NAME]` table the gateway
uses (`url` or `command`, `token_env` / `token_file`, `headers`). The key argument the gateway
fills (`key_argument`) is removed from the schema: the model never supplies it. An operator who
declares `[mcp.tools.NAME] input_schema` keeps theirs and no upstream is asked.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2

from effectgate.mcp.catalog import Catalog, CatalogError, ToolSpec
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TIMEOUT = 30.0


def _token(table: Mapping[str, Any]) -> str:
    if table.get("token_env"):
        return os.environ.get(str(table["token_env"]), "")
    if table.get("token_file"):
        try:
            return Path(str(table["token_file"])).read_text().strip()
        except OSError:
            return ""
    return ""


def _transport(table: Mapping[str, Any]) -> Any:
    token = _token(table)
    if table.get("command"):
        command = [str(c) for c in table["command"]]
        env = {**os.environ, **{str(k): str(v) for k, v in dict(table.get("env") or {}).items()}}
        if token:
            env[str(table.get("token_variable", "MCP_TOKEN"))] = token
        return StdioServerParameters(command=command[0], args=command[1:], env=env)
    headers = {str(k): str(v) for k, v in dict(table.get("headers") or {}).items()}
    if token:
        scheme = str(table.get("auth_scheme", "Bearer"))
        headers[str(table.get("auth_header", "Authorization"))] = f"{scheme} {token}" if scheme else token
    return streamable_http_client(str(table.get("url", "")), http_client=httpx2.AsyncClient(headers=headers))


def strip_key(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    out = dict(schema)
    if key:
        out["properties"] = {k: v for k, v in dict(out.get("properties") or {}).items() if k != key}
        out["required"] = [r for r in out.get("required") or [] if r != key]
    return out


async def upstream_schema(name: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema of the upstream tool `table["tool"]`; a CatalogError says why not."""
    tool = str(table.get("tool", ""))
    try:
        async with asyncio.timeout(TIMEOUT), Client(_transport(table), mode="legacy") as client:
            listed = await client.list_tools()
    except Exception as exc:  # the upstream is down, refused us, or is not an MCP server
        raise CatalogError(
            f"tools.{name}: cannot read the input schema from its upstream MCP server ({type(exc).__name__}); "
            f"is it running? (or declare [mcp.tools.{name}] input_schema)"
        ) from None
    found = {t.name: t for t in listed.tools}
    if tool not in found:
        raise CatalogError(f"tools.{name}: the upstream lists no tool {tool!r} (it lists: {', '.join(sorted(found))})")
    return strip_key(found[tool].input_schema, str(table.get("key_argument", "")))


async def with_upstream_schemas(catalog: Catalog) -> Catalog:
    """`catalog` with the schema of every upstream-MCP tool that has none declared."""
    tools: dict[str, ToolSpec] = dict(catalog.tools)
    for name, spec in catalog.tools.items():
        if spec.upstream is not None and spec.input_schema is None:
            tools[name] = replace(spec, input_schema=await upstream_schema(name, spec.upstream))
    return replace(catalog, tools=tools)
