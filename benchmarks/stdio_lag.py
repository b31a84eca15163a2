"""The event loop's lag while an MCP server's answer of one long line is read over stdio, through the SDK's
`stdio_client` (what the gateway used before) and through `bounded_stdio_client` (agentic_middleware/mcp/stdio.py).

    python -m benchmarks.stdio_lag [--mb 80] [--bound-mb 32]

The server is the `mcp` SDK's over stdio (`python -m benchmarks.stdio_lag serve`); its tool `big` answers one line
of about `--mb` MB (a text of half that, which the SDK's server sends twice: as text and as structured content).
While `big` is read a ticker sleeps 10 ms at a time and records how late it wakes (the lag any other request on the
gateway would see); a small call is sent just after `big`, and waits for it on the same session. Printed: the lag's
p50, p99 and worst, when `big` was answered, and when the small call was (the session free again).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from time import perf_counter
from typing import Any

from mcp import Client, StdioServerParameters, stdio_client

from agentic_middleware.mcp.stdio import bounded_stdio_client

TICK = 0.01


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("lag")

    @server.tool()
    def big(size: int) -> str:
        return "x" * size

    @server.tool()
    def small() -> str:
        return "small"

    server.run("stdio")


async def measure(name: str, transport: Callable[[], AbstractAsyncContextManager[Any]], size: int) -> None:
    async with Client(transport(), mode="legacy") as client:
        await client.call_tool("small", {})  # warmed up
        lags: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                start = perf_counter()
                await asyncio.sleep(TICK)
                lags.append(perf_counter() - start - TICK)

        ticker = asyncio.ensure_future(tick())
        start = perf_counter()
        big = asyncio.ensure_future(client.call_tool("big", {"size": size}))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(client.call_tool("small", {}))
        try:
            await big
            said = "result read whole"
        except Exception as error:
            said = f"error: {error}"
        answered = perf_counter() - start
        await small
        free = perf_counter() - start
        done.set()
        await ticker
    lags.sort()
    p50, p99 = statistics.median(lags), lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(
        f"{name}: big answered after {answered:.2f} s ({said[:60]}), the small call after {free:.2f} s; "
        f"loop lag p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, worst {lags[-1] * 1000:.1f} ms "
        f"({len(lags)} ticks of {TICK * 1000:.0f} ms)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=80)
    parser.add_argument("--bound-mb", type=float, default=32)
    parser.add_argument("--only", choices=["sdk", "bounded"])
    options = parser.parse_args()
    size = int(options.mb * 1_000_000 / 2)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "benchmarks.stdio_lag", "serve"], encoding_error_handler="replace"
    )
    bound = int(options.bound_mb * 1024 * 1024)
    if options.only != "sdk":
        await measure("bounded_stdio_client", lambda: bounded_stdio_client(server, bound), size)
    if options.only != "bounded":
        await measure("SDK stdio_client", lambda: stdio_client(server), size)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    else:
        asyncio.run(main())
