"""MCP servers as server tools: `MCPTools` declares an MCP server's tools to the model and runs its calls.

    from agentic_middleware.mcp import MCPTools
    app.add_middleware(AgenticLoopMiddleware, hooks=[MCPTools("http://docs:8000/mcp", prefix="docs")])

Built on the official `mcp` SDK (the `[mcp]` extra). It is a `ServerTools` whose tools come from the server, so
MCP tools run on every route, concurrently, under the per-call timeout, with errors as results the model reads.
One session per server serves every request: opened when the gateway starts, reopened with backoff when it drops,
and its tool list fetched again when the server says it changed.

tools.py is the hook (its options, the tools as declared, forwarded headers), connection.py the session to the
server kept open, session.py the calls on it, results.py what an MCP result becomes for the model.
"""

try:  # the SDK and what it brings, checked first: a missing one names the extra, not itself
    import httpx2  # noqa: F401
    import mcp  # noqa: F401
except ImportError as error:
    raise ImportError(
        f"agentic_middleware.mcp needs the mcp SDK: pip install 'agentic-middleware[mcp]' ({error})", name=error.name
    ) from error

from .results import tool_result
from .tools import MCPTools, from_config

__all__ = ["MCPTools", "from_config", "tool_result"]
