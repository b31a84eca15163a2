"""The keep-alive timer that all live streams of an event loop share (agentic_middleware/keepalive.py, issue 26):
under uvloop and asyncio, at the edges of its clock, and with a client too slow to read what it is sent."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx2
import orjson
import uvloop
from servers import serving
from starlette.types import Message, Receive, Scope, Send
from streams import event_stream
from support import gated_lookup

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.keepalive import Entry, KeepAlives, keep_alive
from agentic_middleware.testing import ScriptedModel, function_call, message, response


class Stream:
    """A stream as the timer sees it: quiet since `last()`, and its pings counted."""

    def __init__(self, interval: float, last: Callable[[], float | None]) -> None:
        self.interval = interval
        self.last = last
        self.asked = 0
        self.pings: list[float] = []

    def quiet_since(self) -> float | None:
        self.asked += 1
        if self.asked > 100:
            raise RuntimeError("the timer asks the same stream again and again")
        return self.last()

    def ping(self) -> None:
        self.pings.append(asyncio.get_running_loop().time())


def test_uvloop_a_timer_due_within_its_clock_tick_and_a_later_stream_both_ping() -> None:
    """uvloop's `call_at` for a time less than a millisecond ahead gives a plain `Handle`, without `when()`: the
    timer must not ask it when it fires (it raised AttributeError at 10,000 streams)."""

    async def main() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        soon = Stream(0.0001, lambda: started)  # due within uvloop's 1 ms: its timer is a plain Handle
        later = Stream(0.05, lambda: started)
        entries = [keep_alive(soon), keep_alive(later)]  # the second compares its time with the timer's
        while not (soon.pings and later.pings):
            await asyncio.sleep(0.01)
        for entry in entries:
            entry.stop()
        return soon.pings, later.pings

    soon, later = uvloop.run(asyncio.wait_for(main(), 10))
    assert soon and later


class FrozenLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock reads what the test says, as uvloop's reads whole milliseconds."""

    now = 0.0

    def time(self) -> float:
        return self.now


def test_a_stream_due_by_the_heap_is_pinged_though_now_minus_last_rounds_below_its_interval() -> None:
    """`last + interval <= now` and `now - last < interval` can both hold in floating point (with millisecond
    clocks, about one time in fifty at 5 s): the stream is pinged once, not put back at the same time for ever."""
    interval = 5.0
    last = next(
        k / 1000
        for k in range(10**6, 10**6 + 10**5)
        if (k + 5000) / 1000 >= k / 1000 + interval and (k + 5000) / 1000 - k / 1000 < interval
    )
    loop = FrozenLoop()
    try:
        loop.now = last

        async def main() -> Stream:
            timers = KeepAlives()
            stream = Stream(interval, lambda: last)
            timers.add(stream)
            loop.now = round(last * 1000 + 5000) / 1000  # uvloop's clock when the timer fires, on time
            timers.tick()
            assert timers.due[0][0] > loop.now  # next due one interval on
            return stream

        stream = loop.run_until_complete(main())
    finally:
        loop.close()
    assert stream.asked == 1 and len(stream.pings) == 1


def test_each_event_loop_has_its_own_timer_and_frees_ended_streams() -> None:
    async def main() -> tuple[Entry, Stream]:
        stream = Stream(0.01, lambda: 0.0)
        entry = keep_alive(stream)
        while not stream.pings:
            await asyncio.sleep(0.01)
        entry.stop()
        count = len(stream.pings)
        await asyncio.sleep(0.05)
        assert len(stream.pings) == count  # no ping after its stop
        return entry, stream

    for run in (asyncio.run, uvloop.run):  # one loop after another, each with its own timer
        entry, stream = run(main())
        assert entry.stream is None and stream.pings


def test_streams_of_two_event_loops_running_at_once_are_each_pinged_by_their_own_loop() -> None:
    """The timer of the last loop asked is remembered (a server runs one): loops in two threads, asking in turn,
    never get each other's (a stream pinged from another loop's thread would write from the wrong loop)."""
    wrong: list[str] = []

    class Owned(Stream):
        loop: asyncio.AbstractEventLoop

        def ping(self) -> None:
            if asyncio.get_running_loop() is not self.loop:
                wrong.append("a stream was pinged by another loop")
            super().ping()

    async def main() -> list[Owned]:
        streams = []
        for _ in range(200):  # the two threads take turns between these (the GIL switches)
            stream = Owned(0.01, lambda: 0.0)
            stream.loop = asyncio.get_running_loop()
            streams.append(stream)
            keep_alive(stream)
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)
        return streams

    results: dict[int, list[Owned]] = {}
    threads = [
        threading.Thread(target=lambda n=n, run=run: results.__setitem__(n, run(main())))
        for n, run in enumerate((asyncio.run, uvloop.run))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not wrong
    assert len(results) == 2 and all(stream.pings for streams in results.values() for stream in streams)


def test_a_closed_event_loop_is_freed_with_its_timer_due() -> None:
    """A live stream that ended leaves its entry on its loop's timer until the entry comes due; a loop that closes
    meanwhile (`asyncio.run` per call, uvloop's too) must be freed, and the next loop's streams pinged by a timer of
    their own. The timer's handle held the loop (its `_loop`), so every closed loop stayed in `_TIMERS` for ever."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def paused() -> AsyncIterator[bytes]:
        events = list(sse.messages_events(message("hi")))
        yield events[0]
        await asyncio.sleep(0.15)  # quiet long enough for keep-alives
        for event in events[1:]:
            yield event

    def slow(request: Any) -> Any:
        return event_stream(paused())

    async def main() -> list[str]:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        app = AgenticLoopMiddleware(ScriptedModel(slow), hooks=[ServerTools([], timeout=5)], stream_keepalive=0.02)
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gw") as http:
            client = anthropic.AsyncAnthropic(api_key="k", base_url="http://gw", http_client=http)
            raw = await client.messages.with_raw_response.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}], stream=True
            )
            lines = (await raw.http_response.aread()).decode().split("\n")
            return [line for line in lines if line.startswith("event:")]

    for run in (asyncio.run, uvloop.run, asyncio.run):
        kinds = run(main())
        assert "event: ping" in kinds and kinds[-1] == "event: message_stop"
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]


class SendWatch:
    """An ASGI wrapper that records each body the middleware is writing while the server's `send` has not
    returned (the client is not reading, so the write waits on flow control)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.blocked: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched(message: Message) -> None:
            body = message.get("body", b"")
            self.blocked.append(body)
            try:
                await send(message)
            finally:
                self.blocked.remove(body)

        await self.app(scope, receive, watched)


async def test_a_keepalive_written_to_a_client_that_does_not_read_keeps_its_place_in_the_stream() -> None:
    """A long first round fills the socket while the client reads nothing; the tool runs, so a numbered keep-alive
    comes due and its write waits on the client; the second round's events wait behind it. When the client reads,
    every event arrives once, numbered in order, and the stream ends."""
    slow_lookup, release, runs = gated_lookup()

    text = "x" * 400_000
    first = response(text, function_call("slow_lookup", {"key": "k"}))
    model = ScriptedModel(
        event_stream([b"".join(sse.responses_events(first, chunk_size=len(text)))]),  # one write: it fills the socket
        event_stream(list(sse.responses_events(response("It is v.")))),
    )
    watch = SendWatch(
        AgenticLoopMiddleware(model, hooks=[ServerTools([slow_lookup], timeout=30)], stream_keepalive=0.02)
    )
    body = orjson.dumps({"model": "m", "input": "go", "stream": True})
    head = (
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    async with serving("uvicorn", watch, send_buffer=4096) as served, asyncio.timeout(30):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", served.port))
            await loop.sock_sendall(sock, head + body)
            while not (runs and any(b"response.in_progress" in blocked for blocked in watch.blocked)):
                await asyncio.sleep(0.01)  # the tool runs, and a keep-alive's write waits on the client
            release.set()
            await asyncio.sleep(0.2)  # the second round comes, and waits behind the keep-alive
            seen = b""
            while not seen.endswith(b"0\r\n\r\n"):
                chunk = await loop.sock_recv(sock, 65536)
                assert chunk, "the server closed the stream before its end"
                seen += chunk
        finally:
            sock.close()

    _, _, chunked = seen.partition(b"\r\n\r\n")
    events = []
    for line in unchunk(chunked).split(b"\n"):
        if line.startswith(b"data: "):
            events.append(orjson.loads(line[6:]))
    kinds = [event["type"] for event in events]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    first_done = kinds.index("response.output_text.done")
    assert "response.in_progress" in kinds[first_done:]  # the keep-alives between the rounds
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "It is v."


def unchunk(data: bytes) -> bytes:
    """The body of an HTTP/1.1 chunked transfer."""
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += data[:size]
        data = data[size + 2 :]
