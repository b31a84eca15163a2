"""The load generator of cases 5 and 6, run in a process of its own: `python -m benchmarks.loadgen`.

It reads one JSON command a line on stdin and answers each with one JSON line on stdout:
`{"mode": ..., "url": ..., "pages": 3, "concurrency": 16, "requests": 200, "warmup": 10}` runs `requests`
logical requests on `concurrency` keep-alive connections and answers `{"rps", "p50", "p99"}` (milliseconds), or
`{"error": ...}`, with `cpu`: this process's CPU time per request in µs. A logical request makes the upstream call
`lookup` `pages` times before it answers; modes:

- `gateway`: one request to `url` (our gateway or the LiteLLM proxy), whose hooks do the loop;
- `loop`: the client loops by itself against the upstream at `url`, one request per round, same hook logic;
- `litellm`: `litellm.anthropic.messages.acreate` in this process with the hook in `litellm.callbacks`
  and `api_base=url` (only in an interpreter that has LiteLLM);
- `post`: one plain POST to `url` with the HTTP client library named by `client` (`lean`, `aiohttp`, `pyreqwest`,
  `httpx`, `httpx-aiohttp`), one pooled session of `concurrency` connections: what each costs a gateway per upstream
  call.

The HTTP client is a few lines over asyncio streams, so that the load generator costs little next to what it
measures. Each command is bounded by its request count; the process ends at the end of its input.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from time import perf_counter, process_time
from typing import Any
from urllib.parse import urlsplit

import orjson

from .e2e_hooks import claim, follow_up, request

PATH = "/v1/messages"


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and returns the answer's body (200 only)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.head = f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\n{extra}".encode()
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes) -> bytes:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        writer.write(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path.encode(), self.head, len(body), body)
        )
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
        if fields.get(b"transfer-encoding", b"").strip() == b"chunked":
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append((await reader.readexactly(size + 2))[:-2])
            await reader.readuntil(b"\r\n")
            answer = b"".join(chunks)
        else:
            answer = await reader.readexactly(int(fields[b"content-length"]))
        if fields.get(b"connection", b"").strip() == b"close":
            await self.close()
        status = int(head[9:12])
        if status != 200:
            raise RuntimeError(f"POST {path}: {status} {answer[:300]!r}")
        return answer

    async def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


def final(answer: Any) -> None:
    if answer.get("stop_reason") != "end_turn":
        raise RuntimeError(f"the loop did not run to the final answer: {str(answer)[:300]}")


OneRequest = Callable[[], Awaitable[None]]
Post = Callable[[str, bytes], Awaitable[bytes]]
Close = Callable[[], Awaitable[None]]


def library(name: str, concurrency: int, headers: dict[str, str]) -> tuple[Post, Close]:
    """A POST through one pooled client of the named library, and how to close it."""
    headers = {"content-type": "application/json", **headers}
    if name == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

        async def aiohttp_post(url: str, body: bytes) -> bytes:
            async with session.post(url, data=body, headers=headers) as answer:
                content = await answer.read()
            return ok(url, answer.status, content)

        return aiohttp_post, session.close
    if name == "pyreqwest":
        from pyreqwest.client import ClientBuilder

        rust = ClientBuilder().max_connections(concurrency).no_proxy().build()
        sent = list(headers.items())

        async def pyreqwest_post(url: str, body: bytes) -> bytes:
            answer = await rust.post(url).headers(sent).body_bytes(body).build().send()
            return ok(url, answer.status, (await answer.bytes()).to_bytes())

        return pyreqwest_post, rust.close
    if name in ("httpx", "httpx-aiohttp"):
        import httpx

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        if name == "httpx":
            client = httpx.AsyncClient(limits=limits)
        else:
            from httpx_aiohttp import HttpxAiohttpClient

            client = HttpxAiohttpClient(limits=limits)

        async def httpx_post(url: str, body: bytes) -> bytes:
            answer = await client.post(url, content=body, headers=headers)
            return ok(url, answer.status_code, answer.content)

        return httpx_post, client.aclose
    raise ValueError(f"unknown client {name!r}")


def ok(url: str, status: int, body: bytes) -> bytes:
    if status != 200:
        raise RuntimeError(f"POST {url}: {status} {body[:300]!r}")
    return body


def worker(command: dict[str, Any], shared: Post | None) -> tuple[OneRequest, Connection | None]:
    """One logical request of the command's mode, on a connection of its own (or the shared client's pool)."""
    mode, url, pages = command["mode"], command["url"], command["pages"]
    body = request(command.get("model", "scripted-model"), pages)
    if mode == "litellm":
        import litellm  # type: ignore[import-not-found,unused-ignore]

        from .litellm_hook import lookup_hook

        litellm.callbacks = [lookup_hook]

        async def sdk() -> None:
            final(await litellm.anthropic.messages.acreate(api_base=url, api_key="bench", **body))  # type: ignore[attr-defined,unused-ignore]

        return sdk, None
    if shared is not None:
        encoded = orjson.dumps(body)

        async def post() -> None:
            orjson.loads(await shared(url + PATH, encoded))

        return post, None
    connection = Connection(url, command.get("headers", {}))

    async def gateway() -> None:
        final(orjson.loads(await connection.post(PATH, orjson.dumps(body))))

    async def loop() -> None:
        current = body
        for _ in range(pages + 1):
            answer = orjson.loads(await connection.post(PATH, orjson.dumps(current)))
            claimed, tools = claim(answer)
            if not claimed:
                break
            current = {**current, "messages": follow_up(tools["tool_calls"], current["messages"])}
        final(answer)

    if mode == "post":  # the lean client: a plain POST on its own connection
        encoded = orjson.dumps(body)

        async def lean() -> None:
            orjson.loads(await connection.post(PATH, encoded))

        return lean, connection
    return (gateway if mode == "gateway" else loop), connection


async def run(command: dict[str, Any]) -> dict[str, Any]:
    shared, close = None, None
    if command["mode"] == "post" and command.get("client", "lean") != "lean":
        shared, close = library(command["client"], command["concurrency"], command.get("headers", {}))
    workers = [worker(command, shared) for _ in range(command["concurrency"])]
    for index in range(command.get("warmup", 0)):
        await workers[index % len(workers)][0]()
    latencies: list[float] = []
    left = command["requests"]

    async def drive(one: OneRequest) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            start = perf_counter()
            await one()
            latencies.append(perf_counter() - start)

    cpu, start = process_time(), perf_counter()
    try:
        await asyncio.gather(*(drive(one) for one, _ in workers))
    finally:
        elapsed, cpu = perf_counter() - start, process_time() - cpu
        for _, connection in workers:
            if connection is not None:
                await connection.close()
        if close is not None:
            await close()
    latencies.sort()

    def at(share: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(share * len(latencies)))]

    return {"rps": len(latencies) / elapsed, "p50": at(0.5), "p99": at(0.99), "cpu": 1e6 * cpu / len(latencies)}


async def serve() -> None:
    """One event loop for every command, so that clients cached by LiteLLM stay usable between them."""
    out, sys.stdout = sys.stdout, sys.stderr  # what libraries print must not mix with the answers
    while line := await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline):
        try:
            answer = await run(json.loads(line))
        except Exception as error:
            answer = {"error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    asyncio.run(serve())
