"""The load generator of case 12, in a process of its own: `python -m benchmarks.streams_loadgen`.

It reads one JSON command a line on stdin and answers each with one JSON line on stdout:
`{"url": ..., "streams": 1000, "tokens": 50, "delay": 0.2, "rounds": 1, "opening": 256, "route": "/v1/messages"}`
holds `streams` streaming requests to `route` (`/v1/messages`, or `/v1/responses`) open at once (at most `opening`
of them between their connect and their response's first bytes, so that the server's accept queue never
overflows), and answers what the clients received: streams
that completed, errors by kind, SSE events, text deltas and keep-alives, this process's CPU seconds, and the
seconds until every stream had begun and until every one had ended.

Each stream is an `asyncio.Protocol` that counts what it reads and keeps nothing but the last few bytes, so that
ten thousand of them cost this process little next to the server it measures (its CPU is in the answer).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from collections import Counter
from time import perf_counter, process_time
from typing import Any
from urllib.parse import urlsplit

import orjson

from .e2e_hooks import TOOLS
from .openai_streams import responses_request

COUNTED = {
    "/v1/messages": {
        "events": b"\n\n",
        "deltas": b'"text_delta"',
        "pings": b"event: ping",
        "errors": b"event: error",
        "stops": b"event: message_stop",
    },
    "/v1/responses": {
        "events": b"\n\n",
        "deltas": b"event: response.output_text.delta",
        "pings": b"event: response.in_progress",  # the keep-alive's event (and the one of the response's start)
        "errors": b"event: error",
        "stops": b"event: response.completed",
    },
}
"""What each stream counts, by route: the stream is complete when it has one stop."""
END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body
# More than the longest counted string: a count across two reads is made once.
TAIL = max(len(marker) for counted in COUNTED.values() for marker in counted.values())


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Stream(asyncio.Protocol):
    """One streaming request on its own connection: counts what it reads; `begun` when the first bytes come,
    `ended` when the body's last chunk came or the connection was lost."""

    def __init__(self, request: bytes, counted: dict[str, bytes]) -> None:
        self.request = request
        self.counted = counted
        self.counts: Counter[str] = Counter()
        self.tail = b""
        self.status = 0
        self.complete = False
        self.failure = ""
        loop = asyncio.get_running_loop()
        self.begun: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        window = self.tail + data
        if not self.status:
            self.status = int(window[9:12]) if window.startswith(b"HTTP/1.1 ") else -1
            if not self.begun.done():
                self.begun.set_result(None)
        for name, marker in self.counted.items():
            self.counts[name] += window.count(marker) - self.tail.count(marker)
        self.tail = window[-TAIL:]
        if window.endswith(END):
            self.complete = self.counts["stops"] == 1
            self.finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.failure = f"connection lost: {exc}" if exc else "connection closed before the end"
        self.finish()

    def finish(self) -> None:
        for future in (self.begun, self.ended):
            if not future.done():
                future.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def error(self) -> str:
        """What went wrong with this stream, if anything: the first of its failures."""
        if self.failure:
            return self.failure
        if self.status != 200:
            return f"status {self.status}"
        if self.counts["errors"]:
            return "error event"
        return "" if self.complete else "incomplete stream"


def request_bytes(url: str, command: dict[str, Any]) -> bytes:
    parts = urlsplit(url)
    route = command.get("route", "/v1/messages")
    words = f"tokens={command['tokens']} delay={command['delay']} rounds={command.get('rounds', 0)}"
    if route == "/v1/responses":
        body = responses_request(words)
    else:
        messages = [{"role": "user", "content": words}]
        body = orjson.dumps({"model": "m", "max_tokens": 256, "stream": True, "tools": TOOLS, "messages": messages})
    head = f"POST {route} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nContent-Type: application/json\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def run(command: dict[str, Any]) -> dict[str, Any]:
    url = command["url"]
    parts = urlsplit(url)
    request = request_bytes(url, command)
    loop = asyncio.get_running_loop()
    opening = asyncio.Semaphore(command.get("opening", 256))
    counted = COUNTED[command.get("route", "/v1/messages")]
    streams = [Stream(request, counted) for _ in range(command["streams"])]
    cpu, start = process_time(), perf_counter()

    async def one(stream: Stream) -> None:
        async with opening:
            try:
                await loop.create_connection(lambda: stream, parts.hostname, parts.port)
            except OSError as error:
                stream.failure = f"connect: {error}"
                stream.finish()
            await stream.begun
        await stream.ended

    tasks = [asyncio.ensure_future(one(stream)) for stream in streams]
    await asyncio.gather(*(stream.begun for stream in streams))
    opened = perf_counter() - start
    _, late = await asyncio.wait(tasks, timeout=command.get("limit", 150))
    for stream in streams:
        if not stream.ended.done():
            stream.failure = "timed out"
            stream.finish()
    for task in late:
        task.cancel()
    elapsed = perf_counter() - start
    totals: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for stream in streams:
        totals.update(stream.counts)
        if problem := stream.error():
            errors[problem] += 1
    return {
        **totals,
        "streams": len(streams),
        "completed": len(streams) - sum(errors.values()),
        "errors": dict(errors),
        "cpu": process_time() - cpu,
        "opened": opened,
        "seconds": elapsed,
    }


async def serve() -> None:
    raise_fd_limit()
    while line := await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline):
        try:
            answer = await run(json.loads(line))
        except Exception as error:
            answer = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(serve())
