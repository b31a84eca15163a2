"""Case 9: live streaming, in-process, against the model app alone.

- Final-round time to first token: in a looped request (a `lookup` round, then the answer), the time from the app
  sending the final round's first text delta to the client receiving it, through the middleware and with the app
  serving that round alone to the client. Also the first-round figure from the request's start.
- Own time per forwarded event: the slope of the middleware's added CPU time between a 100-event and a
  2,000-event round, so that the fixed cost of a request is left out; on each route the middleware streams, the
  app's events in its API's own shape (`ROUTES`; OpenAI's in `openai_streams.py`), so that each delta takes the
  path a real server's takes: the relay's lane where the API's own bytes allow it, else the SSE reader.
- Native record latency: in a request that declared Anthropic's web search, the time from the search tool's
  completion to its `web_search_tool_result` reaching the client (the record written between two rounds).
- Memory of a 10,000-event stream: the tracemalloc peak of one such request through the middleware, above the
  app's own, against the peak of parsing its answer once (orjson's parser reserves several times the input, and
  the hooks must read the answer whole: that is the floor). Forwarding itself keeps only the text so far.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import Any

import orjson
from starlette.types import Message, Receive, Scope, Send

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.native import Source, search_result
from agentic_middleware.surfaces import ToolResult
from agentic_middleware.testing import message, tool_use

from .cases import Config, Row
from .e2e_hooks import TOOL, TOOLS, Lookup
from .harness import Sample, median, median_difference, paired, us
from .openai_streams import chat_events, chat_request, responses_events, responses_request, token

MARK = b'"text":"tok'  # a text delta of the round being timed
RECORD = b'"type":"web_search_tool_result"'  # a native search's result block
NATIVE_TOOLS = [{"type": "web_search_20250305", "name": "web_search"}]
SOURCES = [Source(f"https://docs.test/{n}", f"Page {n}", "Some text of the page. " * 20, "2 days") for n in range(5)]
SSE_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}


def answer_events(tokens: int) -> list[bytes]:
    """A final answer of `tokens` text deltas ("tok" and a number), one event each, as a model server streams it."""
    body = message("")
    events = [sse.messages_start(body), *list(sse.messages_block(0, {"type": "text", "text": ""}))[:1]]
    events += [
        sse.named_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": token(n)}},
        )
        for n in range(tokens)
    ]
    events.append(sse.named_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return [*events, *sse.messages_end({**body, "usage": {"input_tokens": 10, "output_tokens": tokens}})]


def tool_round() -> list[bytes]:
    return list(sse.messages_events(message("Let me look.", tool_use(TOOL, {"page": 1}, id="toolu_live"))))


class NativeSearch:
    """A web search that answers at once from fixed sources, served for the client's native tool; it notes when it
    completed."""

    def __init__(self) -> None:
        self.done = 0

        @server_tool(name="web_search", description="Search the web.")
        async def web_search(query: str) -> ToolResult:
            result = search_result(query, SOURCES)
            self.done = perf_counter_ns()
            return result

        self.hook = ServerTools([web_search], native={"web_search": "web_search"})


def search_round() -> list[bytes]:
    return list(sse.messages_events(message("Let me search.", tool_use("web_search", {"query": "q"}, id="toolu_ws"))))


class StreamingAnswers:
    """A zero-latency model app: each call drains its request and sends the next round's events, one per message,
    noting when it sends the first event that carries `MARK`."""

    def __init__(self, *rounds: list[bytes]) -> None:
        self.rounds = rounds
        self.calls = 0
        self.marked = 0

    def rewind(self) -> None:
        self.calls = 0
        self.marked = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        events = self.rounds[min(self.calls, len(self.rounds) - 1)]
        self.calls += 1
        await send(SSE_START)
        for event in events:
            if not self.marked and MARK in event:
                self.marked = perf_counter_ns()
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


class Client:
    """One streaming request's scope (on `path`), `receive` (the body, then nothing: the client stays) and `send`,
    which notes when the first event carrying `mark` arrives."""

    def __init__(self, body: bytes, mark: bytes = MARK, path: str = "/v1/messages") -> None:
        self.mark = mark
        self.scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        self.pending = [{"type": "http.request", "body": body, "more_body": False}]
        self.started = 0
        self.arrived = 0
        self.status = 0

    async def receive(self) -> Message:
        if self.pending:
            return self.pending.pop()
        await asyncio.Event().wait()  # the client stays until the answer is complete
        raise AssertionError("unreachable")

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif not self.arrived and self.mark in message.get("body", b""):
            self.arrived = perf_counter_ns()

    async def run(self, app: Any) -> None:
        self.started = perf_counter_ns()
        await app(self.scope, self.receive, self.send)
        if self.status != 200 or not self.arrived:
            raise RuntimeError(f"the stream did not arrive (status {self.status})")


def request(stream: bool = True, tools: list[dict[str, Any]] = TOOLS) -> bytes:
    body: dict[str, Any] = {"model": "m", "max_tokens": 256, "tools": tools, "stream": stream}
    return orjson.dumps({**body, "messages": [{"role": "user", "content": "pages=1"}]})


def sample(app: Any, model: StreamingAnswers, measure: str, route: Route | None = None) -> Sample:
    """One streaming request (on `route`, Messages' by default); the nanoseconds of `measure`: "ttft" (emission
    to arrival of the first marked event), "first" (request start to that arrival) or "cpu" (the CPU time of the
    whole request: the machine's other processes left out, as the process is alone in its thread)."""

    async def run() -> float:
        model.rewind()
        client = Client(request()) if route is None else Client(route.body, route.mark, route.path)
        cpu = thread_time_ns()
        await client.run(app)
        if measure == "ttft":
            return client.arrived - model.marked
        if measure == "first":
            return client.arrived - client.started
        return thread_time_ns() - cpu

    return run


@dataclass(frozen=True)
class Route:
    """A route's stream for the own-time rows: the app's answer of N text deltas in the API's own shape, the
    client's request, and what a text delta of it holds (the client notes its arrival)."""

    path: str
    events: Callable[[int], list[bytes]]
    body: bytes
    mark: bytes
    measure: str
    shape: str


ROUTES = (
    Route("/v1/messages", answer_events, request(), MARK, "own time per forwarded event", "Anthropic's events"),
    Route(
        "/v1/responses",
        responses_events,
        responses_request("pages=1"),
        b'"delta":"tok',
        "own time per forwarded event",
        "OpenAI's events, each text delta with its obfuscation padding (the lane takes them)",
    ),
    Route(
        "/v1/chat/completions",
        chat_events,
        chat_request("pages=1"),
        b'"content":"tok',
        "own time per forwarded event",
        "OpenAI's chunks with include_obfuscation false, usage null in each, the client asking none: the lane "
        "takes them, written anew without the usage",
    ),
    Route(
        "/v1/chat/completions",
        lambda tokens: chat_events(tokens, obfuscated=True),
        chat_request("pages=1", obfuscated=True),
        b'"content":"tok',
        "own time per forwarded event, OpenAI's default obfuscated chunks",
        "OpenAI's chunks as it writes them by default, an obfuscation field differing in each, last: the lane "
        "takes them, each with its own padding",
    ),
)
SIZES = (100, 2000)  # the events of the two rounds whose difference gives the own time per event


async def own_time(route: Route, pairs: int) -> tuple[float, float]:
    """The middleware's added CPU time over the app alone, in nanoseconds, at the two `SIZES` (paired medians)."""
    added = []
    for size in SIZES:
        events = route.events(size)
        model, bare = StreamingAnswers(events), StreamingAnswers(events)
        app = AgenticLoopMiddleware(model, hooks=[Lookup()], streaming=True)
        wrapped, alone = sample(app, model, "cpu", route), sample(bare, bare, "cpu", route)
        runs = await paired({"wrapped": wrapped, "bare": alone}, pairs)
        added.append(median_difference(runs["wrapped"], runs["bare"]))
    return added[0], added[1]


def own_time_row(route: Route, small: float, large: float) -> Row:
    slope = (large - small) / (SIZES[1] - SIZES[0])
    detail = f"{route.shape}; added over the app alone: {us(small)} at {SIZES[0]} events, {us(large)} at {SIZES[1]}"
    return Row(9, f"live stream, {route.path}", route.measure, slope / 1e3, 2.0, detail, unit="µs")


def record_sample(app: Any, model: StreamingAnswers, search: NativeSearch) -> Sample:
    """One streaming request that declared the native search: the nanoseconds from the search's completion to its
    result block's arrival at the client."""

    async def run() -> float:
        model.rewind()
        client = Client(request(tools=NATIVE_TOOLS), RECORD)
        await client.run(app)
        return client.arrived - search.done

    return run


async def peak(app: Any, model: StreamingAnswers) -> int:
    """The tracemalloc peak of one request, above what was allocated before it."""
    model.rewind()
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        await Client(request()).run(app)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def parse_peak(answer: bytes) -> int:
    """The tracemalloc peak of parsing `answer` once: what judging a whole answer costs at the least."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        orjson.loads(answer)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


async def live_stream(config: Config) -> list[Row]:
    name = "live stream, /v1/messages"
    final = answer_events(50)
    looped_model = StreamingAnswers(tool_round(), final)
    looped = AgenticLoopMiddleware(looped_model, hooks=[Lookup()], streaming=True)
    alone = StreamingAnswers(final)
    single_model = StreamingAnswers(final)
    single = AgenticLoopMiddleware(single_model, hooks=[Lookup()], streaming=True)
    search = NativeSearch()
    native_model = StreamingAnswers(search_round(), final)
    native = AgenticLoopMiddleware(native_model, hooks=[search.hook])
    samples = await paired(
        {
            "record": record_sample(native, native_model, search),
            "looped": sample(looped, looped_model, "ttft"),
            "alone": sample(alone, alone, "ttft"),
            "single first": sample(single, single_model, "first"),
            "alone first": sample(alone, alone, "first"),
        },
        config.pairs(400),
    )
    added = median_difference(samples["looped"], samples["alone"])
    first_added = median_difference(samples["single first"], samples["alone first"])

    own = [await own_time(route, config.pairs(60)) for route in ROUTES]

    tokens = 10_000
    events = answer_events(tokens)
    answer = orjson.dumps(message("".join(token(n) for n in range(tokens))))
    model, bare = StreamingAnswers(events), StreamingAnswers(events)
    app = AgenticLoopMiddleware(model, hooks=[Lookup()], streaming=True)
    await peak(app, model)  # warm
    wrapped_peak = min([await peak(app, model) for _ in range(3)])
    bare_peak = min([await peak(bare, bare) for _ in range(3)])
    growth = wrapped_peak - bare_peak
    floor = parse_peak(answer)
    kb = 1024
    return [
        Row(
            9,
            name,
            "final-round TTFT added (p50)",
            added / 1e6,
            2.0,
            f"emission to arrival: through the loop {us(median(samples['looped']))}, app alone "
            f"{us(median(samples['alone']))}; first round from the request's start: +{us(first_added)} "
            f"({us(median(samples['single first']))} vs {us(median(samples['alone first']))})",
            unit="ms",
        ),
        Row(
            9,
            name,
            "native record: search done to its result at the client (p50)",
            median(samples["record"]) / 1e6,
            2.0,
            f"a web_search_tool_result of {len(SOURCES)} results, written between the rounds as the search "
            f"completes: {us(median(samples['record']))} (a text delta of the app alone: "
            f"{us(median(samples['alone']))} from emission to arrival)",
            unit="ms",
        ),
        own_time_row(ROUTES[0], *own[0]),
        Row(
            9,
            name,
            f"memory of a {tokens:,}-event stream, peak / one parse of its answer",
            growth / floor,
            2.5,
            f"tracemalloc peak {growth / kb:.0f} KB above the app alone ({bare_peak / kb:.0f} KB); reading the "
            f"{len(answer) / kb:.0f} KB answer once with orjson peaks at {floor / kb:.0f} KB",
        ),
        *(own_time_row(route, *added) for route, added in zip(ROUTES[1:], own[1:], strict=True)),
    ]


CASES = {9: live_stream}
