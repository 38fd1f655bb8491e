"""`effectgate mcp`: an MCP server in front of the gateway (install the `mcp` extra).

The run context comes only from the call's `_meta` (see `effectgate.mcp.contract`), never from
the model-written arguments.
"""

from effectgate.mcp.contract import META_KEY, CallContext, parse_call_context, run_meta

__all__ = ["META_KEY", "CallContext", "parse_call_context", "run_meta"]
