"""The `mcp` adapter: an upstream MCP server as the provider (needs the `mcp` extra)."""

from effectgate.adapters.mcp.adapter import McpAdapter
from effectgate.adapters.mcp.settings import McpSettings

__all__ = ["McpAdapter", "McpSettings"]
