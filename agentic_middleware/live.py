"""Live streaming: every round's events reach a streaming client as the model app makes them.

The app is called with streaming on. Each round's answer is read as it arrives, by the round's own `send`
(`RoundCapture`, live_round.py), and given to the route's `StreamRelay` (`StreamRelay.read`: a chunk that is one
event the relay can take from its bytes alone skips the SSE reader), which says what goes to the client now and
what is held until the round ends; the round's accumulated body is the `Answer` the hooks judge, exactly as in
buffered mode, so the loop does not know the difference. The client's response begins only when the first round's
answer is known to be a 2xx event stream: an error answer of the first call reaches the client as the app sent it.
Keep-alives go out whenever the client has heard nothing for `interval` seconds: while hooks and tools
run between rounds, and while the app is silent mid-round. They are timed by the event loop's one keep-alive
timer (keepalive.py), not by a task of each stream's own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from starlette.types import Message, Send

from .asgi import Headers, json_start
from .capture import ResponseCapture
from .disconnect import ClientWatch, ClientWriter
from .dispatch import Reply
from .keepalive import Entry, keep_alive
from .live_round import RoundCapture
from .native import NativeCall, NativeRun
from .shown import ShownIds
from .stream import SSE_HEADERS, error_of
from .surfaces import StreamMismatch, StreamRelay, Surface

logger = logging.getLogger("agentic_middleware")

# Headers of the app's stream that do not describe ours.
_NOT_FORWARDED = frozenset((b"content-length", b"transfer-encoding", b"content-type", b"cache-control"))
CLOSING_MESSAGE = 16 * 1024
"""The closing events are written in messages of at least this many bytes (`LiveStream.end`)."""


class LiveStream:
    """One streaming client's response in live mode, across every round of its loop.

    The loop uses it as it uses the buffered `EventStream` (`stop_keep_alive`, `close`, `abort`; nothing is sent
    before the first round's answer, so it has no `open`),
    and the dispatcher reads each round through `capture`. Every write goes through the client's
    `ClientWriter` (a delta the relay passes on, through its `send` and its signs of failure, from `RoundCapture.send`
    itself); the first sign that the client left also cancels the loop, and with it the app's stream.
    """

    __slots__ = (  # it lasts as long as its stream: a gateway holds thousands
        "client",
        "clock",
        "done",
        "interval",
        "judged",
        "kept_alive",
        "last_write",
        "opened",
        "overridden",
        "pinging",
        "relay",
        "sending",
        "shown",
        "stream_options",
        "surface",
        "write",
    )

    def __init__(
        self,
        write: ClientWriter,
        surface: Surface,
        relay: StreamRelay,
        stream_options: Any,
        interval: float,
    ) -> None:
        self.write = write
        self.surface = surface
        self.relay = relay
        self.stream_options = stream_options  # the client's
        self.interval = interval
        self.overridden = False  # the final answer is a plan's `response_override`: set by the loop before `close`
        self.opened = False
        self.done = False  # the stream's end was written, or the client left
        self.last_write = 0.0
        # The last round's answer as the relay built it, with the bytes written from it, until the next round begins:
        # the closing events of a reply of those very bytes are written from it, not from the bytes read back.
        self.judged: tuple[bytes, dict[str, Any]] | None = None
        self.kept_alive: Entry | None = None  # the stream's place on the keep-alive timer, from its start
        # A relay write and a keep-alive never overlap, so that a numbered keep-alive goes out in its place.
        self.sending = False
        self.pinging: asyncio.Task[None] | None = None
        self.clock = _clock(asyncio.get_running_loop())
        assert write.client is not None, "a live stream's writer watches its client"
        self.client: ClientWatch = write.client
        # A Responses route's `send` that hides internal ids: a delta it passes as it is goes straight to the server's.
        self.shown = write.send if isinstance(write.send, ShownIds) else None

    def capture(
        self,
        send: Send,
        forward_headers: Callable[[], Headers] | None,
        limit: int,
        on_forward: Callable[[], object] | None = None,
        forward: bool = True,
        read_stream: Callable[[bytes], object] | None = None,
    ) -> ResponseCapture:
        """The `send` of one call of the app, which is one round: live when the app streams."""
        self.relay.begin_round()
        self.judged = None
        if self.opened:  # nothing of a later round goes to the client as the app sent it: nothing to forward with
            return RoundCapture(self, send, None, limit, None, False, read_stream)
        return RoundCapture(self, send, forward_headers, limit, on_forward, True, read_stream)

    async def start(self, app_start: Message | None) -> None:
        """Begin the client's response: our event-stream headers, with the app's own others."""
        app_headers = app_start.get("headers", ()) if app_start is not None else ()
        headers = [(name, value) for name, value in app_headers if name.lower() not in _NOT_FORWARDED]
        if headers:
            names = {name.lower() for name, _ in headers}
            headers += [header for header in SSE_HEADERS if header[0] not in names]
        else:  # most apps: only a content-type, which is ours
            headers = SSE_HEADERS.copy()
        self.opened = True
        await self.written({"type": "http.response.start", "status": 200, "headers": headers})
        self.kept_alive = keep_alive(self)

    async def send(self, data: bytes) -> None:
        """Send events to the client now (after the keep-alive being written, if one is)."""
        self.sending = True
        try:
            if self.pinging is not None:
                await self.pinging
            await self.written({"type": "http.response.body", "body": data, "more_body": True})
        finally:
            self.sending = False

    async def announce(self, search: NativeCall, round: int) -> bool:
        """Send that a native call is being searched, if the relay can place it (see `StreamRelay.announce`)."""
        return await self.sent(self.relay.announce(search, round))

    async def record(self, run: NativeRun, round: int) -> bool:
        """Send a native call's record now, if the relay can place it (see `StreamRelay.record`)."""
        return await self.sent(self.relay.record(run, round))

    async def sent(self, events: Sequence[bytes] | None) -> bool:
        if events is None:
            return False
        if events:
            await self.send(b"".join(events))
        return True

    async def written(self, message: Message, wait_on_app: bool = True) -> None:
        if wait_on_app:  # between two writes the loop waits on the app, which lets a disconnect be heard
            await self.write.forward(message)
        else:
            await self.write(message)
        self.wrote()

    def wrote(self) -> None:
        """After a write: the time is noted for the keep-alives, and a failed write stops the loop (and the app's
        stream) as a disconnect does."""
        if self.write.failed:
            self.client.left()
        self.last_write = self.clock()

    def quiet_since(self) -> float | None:
        """For the keep-alive timer: when the client last heard from us; None while something is being written."""
        return None if self.sending or self.pinging is not None else self.last_write

    def ping(self) -> None:
        """For the keep-alive timer, after `interval` of silence: write a keep-alive, unless the client left."""
        if self.write.closed:
            if self.kept_alive is not None:
                self.kept_alive.stop()
            return
        self.pinging = asyncio.ensure_future(self.keep_alive())

    async def keep_alive(self) -> None:
        """The keep-alive, looked at again one step after the timer: an event loop that was late wakes the timer
        and the relay at once, and the relay's events already on their way go first (no keep-alive before them).
        The event is made here, the relay's own (numbered) if it has one, else the surface's: a relay event read
        after this step takes the next number, and its write (`send`) waits until this one is written."""
        try:
            if self.sending or self.last_write + self.interval > asyncio.get_running_loop().time():
                return
            event = self.relay.keepalive() or self.surface.keepalive()
            await self.written({"type": "http.response.body", "body": event, "more_body": True})
        finally:
            self.pinging = None

    async def stop_keep_alive(self) -> None:
        """No keep-alive after this; one already made is written first (its number is taken)."""
        if self.kept_alive is not None:
            self.kept_alive.stop()
            self.kept_alive = None
        if self.pinging is not None:
            await self.pinging

    async def close(self, reply: Reply | None) -> None:
        """End the client's response with the loop's reply."""
        if self.kept_alive is not None or self.pinging is not None:  # the loop stopped them already, as a rule
            await self.stop_keep_alive()
        if not self.opened:
            if reply is None:
                return  # the app's own answer went to the client
            if not 200 <= reply.start["status"] < 300:  # an error before anything was streamed: with its status
                await self.write(reply.start)
                await self.write({"type": "http.response.body", "body": reply.body})
                self.done = True
                return
            await self.start(None)
        await self.end(self.closing(reply) if reply is not None else [])

    async def abort(self, status: int, message: str, code: str) -> None:
        """End a response that cannot be finished (the request was cancelled): an error event, or an error."""
        await self.stop_keep_alive()
        if self.done:
            return
        if self.opened:
            await self.end([self.error_event(status, message, code)])
        elif not self.write.started:
            body = self.surface.error_body(status, message, code)
            await self.write(json_start(status, len(body)))
            await self.write({"type": "http.response.body", "body": body})
            self.done = True

    async def end(self, events: list[bytes]) -> None:
        """The last events, then the stream's end; stopping at once if the client leaves.

        The events go in messages of `CLOSING_MESSAGE` bytes or more (all of a live round's held tail in one: a
        message each cost the server a write each), and between two messages the event loop runs once, so that a
        disconnect the server noticed is heard while a whole answer is written here (a JSON answer to a streaming
        call). Not before the first, as the loop just ran while the round ended: a turn was a pause after which the
        stream's state is read again from cold caches among the other streams' (benchmarks case 12).

        One message (a live round's held tail, a short answer) ends the response itself: an empty message after it
        was one more write of the server's. After several, the end is an empty message of its own, as before: the
        last of them has its turn of the event loop before it, as each after the first."""
        if self.kept_alive is not None:  # `close` may have started the response after stopping its keep-alives
            self.kept_alive.stop()
            self.kept_alive = None
        pieces = _joined(events, CLOSING_MESSAGE)
        for number, data in enumerate(pieces):
            message: Message = {"type": "http.response.body", "body": data, "more_body": len(pieces) > 1}
            await self.written(message, wait_on_app=not number)
            if self.write.closed:
                break
        else:
            if len(pieces) != 1:
                await self.write({"type": "http.response.body", "body": b""})
        self.done = True

    def error_event(self, status: int, message: str, code: str) -> bytes:
        """A failure reported in the stream: in the relay's own terms when it has them (its stream's state)."""
        return self.relay.error_event(status, message, code) or self.surface.error_event(status, message, code)

    def closing(self, reply: Reply) -> list[bytes]:
        """The events that end the stream: the rest of the answer, or an error event."""
        status = reply.start["status"]
        body = self.answer_of(reply)
        if 200 <= status < 300 and isinstance(body, dict):
            try:
                built = self.judged[1] if self.judged is not None else None  # not built again to be compared
                return self.relay.finish(body, fresh=self.overridden, built=built)
            except StreamMismatch as error:
                logger.error(
                    "a hook changed an answer whose text was already streamed (%s); a hook that rewrites answers "
                    'must declare agentic_loop_streaming = "buffered"',
                    error,
                )
                message = f"the answer was changed after it was streamed: {error}"
                return [self.error_event(500, message, "stream_rewritten")]
            except Exception as error:
                logger.exception("could not write the answer as a stream")
                message = f"the answer could not be streamed: {error}"
                return [self.error_event(502, message, "model_app_error")]
        message, code = error_of(body, reply.body, status)
        return [self.error_event(status if status >= 400 else 502, message, code)]

    def answer_of(self, reply: Reply) -> Any:
        """The reply's body as an object: when they are the last round's very bytes, the answer the relay built them
        from (JSON's own types by construction, parsed from the app's events), else its bytes read (None when they are
        not JSON). Not a hook's object: it may hold what JSON writes otherwise (a tuple, an SDK object)."""
        if self.judged is not None and reply.body is self.judged[0]:
            return self.judged[1]
        try:
            return orjson.loads(reply.body)
        except orjson.JSONDecodeError:
            return None


def _clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """The loop's time, which the keep-alive timer reads: asyncio's own is `time.monotonic` called from Python, which
    costs a write of the relay's lane about a tenth of what it adds (benchmarks case 12), so that is taken itself."""
    return time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time


def _joined(events: list[bytes], size: int) -> list[bytes]:
    """The events in order, joined into pieces of `size` bytes or more (the last may hold less)."""
    if sum(map(len, events)) < size:  # most streams: the held tail, in one piece
        return [b"".join(events)] if events else []
    pieces: list[bytes] = []
    pending: list[bytes] = []
    held = 0
    for event in events:
        pending.append(event)
        held += len(event)
        if held >= size:
            pieces.append(b"".join(pending))
            pending, held = [], 0
    if pending:
        pieces.append(b"".join(pending))
    return pieces
