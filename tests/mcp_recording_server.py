"""An MCP server for the session tests, written with the `mcp` SDK, that writes down each run of its tools.

    python tests/mcp_recording_server.py RUNS            # over stdio
    python tests/mcp_recording_server.py RUNS --hold     # over stdio, a long answer line held half written
    python tests/mcp_recording_server.py RUNS --fd FD    # over streamable HTTP on an inherited listening socket

Each run of `record` appends "<order> <pid>" to the file RUNS before it waits, so a test can kill the server in
the middle of a call and count the runs. `noisy` prints a line that is not JSON (or not even UTF-8) on the stdout
the client reads, as a server run by `npx` may have npm do. With `--hold`, an answer line longer than `HOLD` bytes is
written up to `HOLD` bytes, "held <pid>" appended to RUNS, and the rest written only once `release` is called.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import sys
import threading

from mcp.server.mcpserver import MCPServer

WIRE = os.dup(1)  # stdout as the client reads it: the SDK's stdio server moves what the process prints to stderr
HOLD = 2_000_000
released = threading.Event()


class HeldWire(io.RawIOBase):
    """The wire, holding a line longer than `HOLD` after its first `HOLD` bytes until `release` is called. The SDK
    writes from a worker thread, so the server goes on reading requests and running tools meanwhile."""

    def __init__(self, runs: str) -> None:
        super().__init__()
        self.runs = runs
        self.line = 0  # bytes of the current line written so far

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        data = bytes(data)
        first = data.find(b"\n")
        start, end = self.line, self.line + (len(data) if first < 0 else first)
        if start < HOLD < end:
            self._send(data[: HOLD - start])
            with open(self.runs, "a") as file:
                file.write(f"held {os.getpid()}\n")
            released.wait()
            released.clear()
            self._send(data[HOLD - start :])
        else:
            self._send(data)
        last = data.rfind(b"\n")
        self.line = self.line + len(data) if last < 0 else len(data) - last - 1
        return len(data)

    @staticmethod
    def _send(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(WIRE, view) :]


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

    @server.tool(description="Let a held answer line be written whole (`--hold`).")
    def release() -> str:
        released.set()
        return "released"

    return server


def main() -> None:
    server = build(sys.argv[1])
    if "--hold" in sys.argv:
        sys.stdout = io.TextIOWrapper(HeldWire(sys.argv[1]), encoding="utf-8")  # not fd 1: the SDK writes to it
    if "--fd" not in sys.argv:
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
    uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
