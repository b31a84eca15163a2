"""The server side of case 12: a scripted model app that streams Anthropic Messages (`/v1/messages`) or OpenAI
Responses (`/v1/responses`, OpenAI's events: `openai_streams.py`) slowly, bare or behind the middleware, wrapped in a
probe that measures the worker's event loop. One uvicorn worker serves one of them:

    python -m uvicorn benchmarks.streams_app:bare --backlog 16384
    python -m uvicorn benchmarks.streams_app:wrapped --backlog 16384
    python -m uvicorn benchmarks.streams_app:floor --backlog 16384   (a reference: `ReadingFloor`)

The first user message says what to stream: `tokens=20 delay=0.5 rounds=1`: with `rounds=1` and no tool result in
the history yet, a round that calls the `lookup` server tool (Messages only); then `tokens` text deltas, `delay`
seconds apart.
The events are serialized once, at import or at the first request of each size. `GET /probe` answers the probe's
figures (event-loop lag p50/p99/max in ms, resident memory and its peak in KB, this process's CPU seconds);
`POST /probe` resets them (the lag samples, and the peak of resident memory, Linux's `clear_refs`) and answers them.
The probe is this benchmark's, not the library's: it runs outside the middleware. With `BENCH_GC_THRESHOLD` set
(`10000,10,10`), the worker sets the garbage collector's thresholds to it at start-up, as an operator may
(docs/performance.md, case 12).
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import time
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool

from .live_stream import SSE_START, answer_events, tool_round
from .openai_streams import responses_events

PROBE_EVERY = 0.01
"""Seconds between two wake-ups of the lag probe: it notes by how much each came late."""


def raise_fd_limit() -> None:
    """Ten thousand connections need ten thousand descriptors: take the hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@cache
def final_round(tokens: int, path: str = "/v1/messages") -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The final answer's events on the route: those before the deltas, the deltas, those after."""
    events, head = (responses_events(tokens), 4) if path == "/v1/responses" else (answer_events(tokens), 2)
    return events[:head], events[head : head + tokens], events[head + tokens :]


TOOL_ROUND = tool_round()


def script(body: Any) -> tuple[int, float, bool]:
    """What the request asks for: the number of text deltas, the delay between them, and whether to call a tool."""
    messages = body.get("messages") or body["input"]  # Messages' or Responses'
    words = dict(word.split("=", 1) for word in messages[0]["content"].split())
    answered = any(isinstance(m["content"], list) for m in messages[1:])  # the tool's result came back
    return int(words["tokens"]), float(words["delay"]), words.get("rounds") == "1" and not answered


async def slow_model(scope: Scope, receive: Receive, send: Send) -> None:
    """The model app: a tool round at once when asked, else the text in the route's events, one delta per `delay`."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    tokens, delay, tool = script(orjson.loads(b"".join(chunks)))
    await send(SSE_START)
    if tool:
        events = TOOL_ROUND
    else:
        head, deltas, tail = final_round(tokens, scope["path"])
        for event in head:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        for event in deltas:
            await asyncio.sleep(delay)
            await send({"type": "http.response.body", "body": event, "more_body": True})
        events = tail
    for event in events:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@server_tool(name="lookup", description="Look a page up.")
async def lookup(page: int) -> str:
    return f"page {page}: 42 results"


class Probe:
    """Wakes every `PROBE_EVERY` seconds and notes how late it woke: the event loop's lag, as every stream feels it.
    It also times the garbage collector's runs (`gc.callbacks`): the CPU they take, by generation."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.task: asyncio.Task[None] | None = None
        self.collecting = 0.0  # the process's CPU time when the collection under way began
        self.collector = [0.0, 0.0, 0.0]  # CPU seconds in collections of each generation
        self.collections = [0, 0, 0]
        gc.callbacks.append(self.collected)

    def collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collecting = time.process_time()
            return
        self.collector[info["generation"]] += time.process_time() - self.collecting
        self.collections[info["generation"]] += 1

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        clock = asyncio.get_running_loop()
        while True:
            before = clock.time()
            await asyncio.sleep(PROBE_EVERY)
            self.lags.append(clock.time() - before - PROBE_EVERY)

    def figures(self) -> dict[str, float]:
        lags = sorted(self.lags) or [0.0]

        def at(share: float) -> float:
            return 1000 * lags[min(len(lags) - 1, int(share * len(lags)))]

        usage = resource.getrusage(resource.RUSAGE_SELF)
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        return {
            "lag_p50": at(0.5),
            "lag_p99": at(0.99),
            "lag_max": 1000 * lags[-1],
            "samples": len(self.lags),
            "rss_kb": int(status["VmRSS"].split()[0]),
            "hwm_kb": int(status["VmHWM"].split()[0]),
            "cpu": usage.ru_utime + usage.ru_stime,
            "user": usage.ru_utime,
            "gc": sum(self.collector),
            "full gc": self.collector[2],
            "full collections": self.collections[2],
        }

    def reset(self) -> None:
        self.lags = []
        self.collector, self.collections = [0.0, 0.0, 0.0], [0, 0, 0]
        Path("/proc/self/clear_refs").write_text("5")  # the peak of resident memory starts again from now


def gc_thresholds() -> tuple[int, ...] | None:
    """`BENCH_GC_THRESHOLD` (`10000,10,10`) as `gc.set_threshold` takes it, or None when unset. A value it cannot
    take raises here, and the benchmark checks it before any worker starts: in the worker's lifespan, uvicorn's
    `--lifespan auto` would take the error for an app without lifespan and serve on without the probe (lag 0.0)."""
    text = os.environ.get("BENCH_GC_THRESHOLD", "").strip()
    if not text:
        return None
    try:
        values = tuple(int(value) for value in text.split(","))
    except ValueError:
        values = ()
    if not 1 <= len(values) <= 3 or not all(0 <= value <= 2**31 - 1 for value in values):
        limits = "one to three whole numbers from 0 to 2147483647, e.g. 10000,10,10"
        raise ValueError(f"BENCH_GC_THRESHOLD={text!r}: {limits}")
    return values


class Probed:
    """The worker's app: `/probe` answered here, everything else by the app inside; the probe starts with the
    lifespan, and the file descriptor limit is raised then too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.probe = Probe()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            raise_fd_limit()
            thresholds = gc_thresholds()
            if thresholds:
                gc.set_threshold(*thresholds)
            self.probe.start()
        elif scope["type"] == "http" and scope["path"] == "/probe":
            if scope["method"] == "POST":
                self.probe.reset()
            body = orjson.dumps(self.probe.figures())
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            start: Message = {"type": "http.response.start", "status": 200, "headers": headers}
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class ReadingFloor:
    """The least a middleware that reads a live stream does, for reference: one coroutine per message of the app,
    each text delta's data parsed (orjson) and its text kept, the message forwarded as it came. It judges nothing,
    renumbers nothing and checks no framing: what any reading relay costs at the least (docs/performance.md)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        text: list[str] = []

        async def relay(message: Message) -> None:
            chunk = message.get("body")
            if chunk and chunk.startswith(_DELTA):
                text.append(orjson.loads(chunk[_DELTA_DATA:-2])["delta"]["text"])
            await send(message)

        await self.app(scope, receive, relay)


_DELTA = b"event: content_block_delta\ndata: "
_DELTA_DATA = len(_DELTA)

bare = Probed(slow_model)
wrapped = Probed(AgenticLoopMiddleware(slow_model, hooks=[ServerTools([lookup])]))
floor = Probed(ReadingFloor(slow_model))
