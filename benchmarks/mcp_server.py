"""The MCP server of case 8, in a process of its own: `python -m benchmarks.mcp_server FD` serves streamable HTTP
on the socket it inherits (bound by the benchmark to a free port, so that nothing can take the port between)."""

from __future__ import annotations

import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

from .mcp_case import define


def main() -> None:
    server = MCPServer("bench")
    server.tool(name="define", description="Define a word.")(define)
    # Not `uvicorn.run(fd=...)`: that takes the socket for a unix one and leaves Nagle on (40 ms a response).
    sock = socket.socket(fileno=int(sys.argv[1]))
    uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
