"""An MCP server for the session tests, written with the `mcp` SDK, that writes down each run of its tools.

    python tests/mcp_recording_server.py RUNS            # over stdio
    python tests/mcp_recording_server.py RUNS --fd FD    # over streamable HTTP on an inherited listening socket

Each run of `record` appends "<order> <pid>" to the file RUNS before it waits, so a test can kill the server in
the middle of a call and count the runs. `noisy` prints a line that is not JSON (or not even UTF-8) on the stdout
the client reads, as a server run by `npx` may have npm do.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer

WIRE = os.dup(1)  # stdout as the client reads it: the SDK's stdio server moves what the process prints to stderr


def build(runs: str) -> MCPServer:
    server = MCPServer("recording")

    @server.tool(description="Record an order, then take `seconds`.")
    async def record(order: str, seconds: float = 2.0) -> str:
        with open(runs, "a") as file:
            file.write(f"{order} {os.getpid()}\n")
        await asyncio.sleep(seconds)
        return f"recorded {order}"

    @server.tool(description="Print a line on stdout that is not an MCP message (`bytes`: one not even UTF-8).")
    def noisy(bytes: bool = False) -> str:
        os.write(WIRE, b"\xff\xfe\x00 npm notice\n" if bytes else b"npm notice New major version of npm available!\n")
        return f"noisy pid={os.getpid()}"

    @server.tool(description="A text of `size` characters.")
    def big(size: int) -> str:
        return "x" * size

    return server


def main() -> None:
    server = build(sys.argv[1])
    if "--fd" not in sys.argv:
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
    uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
