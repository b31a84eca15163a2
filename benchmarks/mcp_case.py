"""Case 8: what one MCP tool call adds to a request, over streamable HTTP, against the same function as a
`@server_tool`.

The MCP server is the `mcp` SDK's, under uvicorn in its own process on 127.0.0.1 (as a deployed one would be).
Three variants run interleaved: a request whose one tool call runs `define` in-process (`ServerTools`), the same
request with `define` served by the MCP server (`MCPTools`), and the bare SDK call (`Client.call_tool`) that
`MCPTools` makes, so that the detail shows how much of the added time is the protocol's and how much ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from time import perf_counter_ns

import orjson
from starlette.types import Message

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool

from .cases import Config, Row
from .fixtures import ScriptedAnswers
from .harness import Sample, median, median_difference, paired, prepare, us

NAME = "one MCP tool call (streamable HTTP)"


def define(word: str) -> str:
    """The tool both variants serve."""
    return f"{word}: a word"


@contextlib.asynccontextmanager
async def mcp_server() -> AsyncIterator[str]:
    """The MCP server in a child process, on a socket bound here; its URL once it answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.mcp_server", str(sock.fileno())],
        pass_fds=[sock.fileno()],
        cwd=Path(__file__).parent.parent,
    )
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        process.terminate()
        process.wait(10)
        sock.close()


async def one_request(model: ScriptedAnswers, app: AgenticLoopMiddleware, body: bytes) -> float:
    """One request, timed; unlike `asgi_sample`'s, the client stays connected while the tool's I/O runs."""
    model.rewind()
    call = prepare("POST", "/v1/messages", body)
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    connected = asyncio.Event()  # never set: the client never leaves

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await connected.wait()
        return {"type": "http.disconnect"}

    start = perf_counter_ns()
    await app(call.scope, receive, call.send)
    elapsed = perf_counter_ns() - start
    if call.status != 200:
        raise RuntimeError(f"status {call.status}: {call.body[:300]!r}")
    return elapsed


def answers() -> list[bytes]:
    from agentic_middleware.testing import message, tool_use

    return [
        orjson.dumps(message(tool_use("define", {"word": "gist"}, id="toolu_def"))),
        orjson.dumps(message("A gist is the main point.")),
    ]


async def mcp_call(config: Config) -> list[Row]:
    if importlib.util.find_spec("mcp") is None:
        return [Row(8, NAME, "skipped: needs the mcp SDK (the mcp extra)", 0, 1, "", skipped=True)]
    from mcp import Client

    from agentic_middleware.mcp import MCPTools

    body = orjson.dumps(
        {"model": "scripted-model", "max_tokens": 64, "messages": [{"role": "user", "content": "define gist"}]}
    )
    in_process = ScriptedAnswers(*answers())
    over_mcp = ScriptedAnswers(*answers())
    async with mcp_server() as url:
        hook = MCPTools(url, required=True)
        for _ in range(100):  # the child process takes a moment to import and serve
            try:
                await hook.async_startup()
                break
            except ConnectionError:
                await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"the MCP server at {url} did not start")
        try:
            async with Client(url) as client:

                async def sdk_call() -> float:
                    start = perf_counter_ns()
                    await client.call_tool("define", {"word": "gist"})
                    return perf_counter_ns() - start

                with_server_tool = AgenticLoopMiddleware(in_process, hooks=[ServerTools([server_tool(define)])])
                with_mcp = AgenticLoopMiddleware(over_mcp, hooks=[hook])

                def request(model: ScriptedAnswers, app: AgenticLoopMiddleware) -> Sample:
                    return lambda: one_request(model, app, body)

                samples = await paired(
                    {
                        "server_tool": request(in_process, with_server_tool),
                        "mcp": request(over_mcp, with_mcp),
                        "sdk": sdk_call,
                    },
                    config.pairs(300),
                )
        finally:
            await hook.async_shutdown()
    added = median_difference(samples["mcp"], samples["server_tool"])
    sdk = median(samples["sdk"])
    detail = (
        f"request with MCPTools {us(median(samples['mcp']))}, with @server_tool {us(median(samples['server_tool']))}; "
        f"the SDK's call_tool alone {us(sdk)}"
    )
    return [
        Row(8, NAME, "added over @server_tool", added / 1e6, 5.0, detail, unit="ms"),
        Row(8, NAME, "added / the SDK's own call_tool", added / sdk, 1.2, detail),
    ]


CASES = {8: mcp_call}
