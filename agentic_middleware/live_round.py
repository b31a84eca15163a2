"""One round of a live stream: the `send` of one call of the app (`RoundCapture`), read as its events come.

`LiveStream` (live.py) makes one per call. A chunk that is one event the relay can take from its bytes alone (most
of a stream: its text deltas) is written to the client from here, in the one coroutine it goes through; every other
chunk is read by the SSE reader, then the relay, and what the relay gives goes out through the live stream. When the
round's stream ends, the capture holds the relay's accumulated body as the round's JSON answer, which the hooks judge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from starlette.types import Message, Send

from .asgi import Headers
from .capture import ResponseCapture
from .disconnect import ClientWatch, ClientWriter
from .error_types import UNKNOWN_ERROR_STATUS
from .payload import own_size
from .shown import ShownIds
from .sniff import is_event_stream
from .sse_reader import SSEReader
from .surfaces import AppStreamError, StreamRelay, Surface


class LiveStream(Protocol):
    """What a round reads and writes of its live stream (`live.LiveStream`, which makes each round's capture)."""

    write: ClientWriter
    shown: ShownIds | None
    client: ClientWatch
    surface: Surface
    relay: StreamRelay
    opened: bool
    sending: bool
    pinging: asyncio.Task[None] | None
    last_write: float
    clock: Callable[[], float]
    judged: tuple[bytes, dict[str, Any]] | None

    async def start(self, app_start: Message | None) -> None: ...

    async def send(self, data: bytes) -> None: ...


_FAILED_START: Message = {
    "type": "http.response.start",
    "status": UNKNOWN_ERROR_STATUS,
    "headers": [(b"content-type", b"application/json")],
}


class RoundCapture(ResponseCapture):
    """The `send` of one round: an event stream is read as it comes, anything else as `ResponseCapture` does.

    When the stream ends, the capture holds the relay's accumulated body as a JSON answer, so the
    dispatcher returns it like any other; a stream that failed or ended early becomes an error answer: of the status
    its error event's type stands for (`error_types.py`), else 502.
    """

    def __init__(
        self,
        live: LiveStream,
        send: Send,
        forward_headers: Callable[[], Headers] | None,
        limit: int,
        on_forward: Callable[[], object] | None,
        forward: bool,
        read_stream: Callable[[bytes], object] | None,
    ) -> None:
        # Its arguments written out, as `LiveStream.capture` passes them: packing them and unpacking them again
        # for the base's `__init__` was a third of what making a round's capture cost (benchmarks.callgrind streams).
        ResponseCapture.__init__(self, send, forward_headers, limit, on_forward, forward, read_stream)
        self.live = live
        self.reader: SSEReader | None = None
        self.failure: bytes | None = None
        self.failure_status = UNKNOWN_ERROR_STATUS  # an error event's: the status its type stands for
        self.idle = False  # reading a stream, nothing failed, and its reader between two events: `send`'s lane is open

    async def as_event_stream(self) -> bool:
        """The answer's first bytes are an event stream's though its type did not say: read it as one, live."""
        assert self.start is not None
        self.reader = SSEReader()
        self.readable = True
        if not self.live.opened:
            await self.live.start(self.start)
        held, self.chunks, self.size, complete = self.body, [], 0, self.complete
        await self.send({"type": "http.response.body", "body": held, "more_body": not complete})
        return False

    async def send(self, message: Message) -> None:
        offered = False  # the lane offered the chunk to `pass_on`, which declined it: the reader reads it
        if self.idle and message.get("more_body", False):
            # The lane most of a stream takes: one whole event, between two events, that the relay passes on without
            # the reader (`StreamRelay.pass_on`), written to the client from here. Each coroutine an event goes
            # through costs about what reading it does (benchmarks case 12), so this is the only one. Its type is
            # not looked at (a twentieth of what the lane costs, `python -m benchmarks.callgrind stream-deltas`): a
            # message that may continue is a body (ASGI's `http.response.body`; the `zerocopysend` extension's has
            # no `body`, and no relay takes b""), and what `pass_on` declines goes to the reader's branch below,
            # which does look.
            chunk = message.get("body", b"")
            live = self.live
            write = live.write
            size = self.size + len(chunk)
            if live.pinging is None and not write.failed and not live.client.gone and size <= self.limit:
                try:
                    out = live.relay.pass_on(chunk)
                except Exception as error:
                    self.unreadable(error)
                    return
                if out is not None:
                    self.size = size
                    if not out:  # held or dropped: nothing reached the client (as `relayed` leaves it)
                        return
                    self.heard = True
                    live.sending = True
                    send = write.send
                    shown = live.shown
                    # No id to hide yet (read here, not in the call, which costs a Responses delta about 0.5k
                    # instructions, 3% of what the middleware adds), or none in this delta: past that `send`'s
                    # coroutine.
                    if shown is not None and (not shown.hidden or shown.passes(out, live.relay)):
                        send = shown.send
                    if out is not chunk:  # written anew (a later round's, the client's own bytes): a message of its own
                        message = {"type": "http.response.body", "body": out, "more_body": True}
                    try:  # as `ClientWriter.forward` writes, and `LiveStream.wrote` after it
                        await send(message)
                    except Exception:
                        write.broke()
                        live.client.left()
                    finally:
                        live.sending = False
                    live.last_write = live.clock()
                    return
                offered = True
        if self.reader is not None:  # every other chunk of the stream: read by the reader, then the relay
            if message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                if chunk and self.failure is None:
                    out = self.relayed(chunk, offered)
                    if out:  # what the relay held or dropped (a rerun's own message_start) never reached the client
                        self.heard = True
                        await self.live.send(out)
                    self.idle = self.failure is None and self.reader.between_events
                if not message.get("more_body", False):
                    self.idle = False
                    self.ended()
            return
        if message["type"] == "http.response.start" and not self.forwarded and is_event_stream(message):
            self.reader = SSEReader()
            self.start = message
            if not self.live.opened:
                await self.live.start(message)
            return
        await super().send(message)
        if self.complete and self.readable and not (self.live.opened or self.forwarded or self.oversize):
            await self.live.start(None)  # a JSON answer to a streaming call: written as a stream at the end

    def ended(self) -> None:
        """The round's stream ended: its answer is the relay's accumulated body, or an error answer."""
        self.complete = True
        body = raw = None
        if self.failure is None:
            try:
                body = self.live.relay.body()
                raw = None if body is None else own_size(orjson.dumps(body))
            except Exception as error:  # a streamed string read at the end (`Spelled`) was not JSON, or the answer
                self.unreadable(error)  # nests deeper than orjson writes (254 levels)
        if body is not None and raw is not None:
            self.chunks = [raw]
            self.live.judged = (raw, body)
            return
        self.readable = False
        self.start = {**_FAILED_START, "status": self.failure_status}
        self.chunks = [
            self.failure
            or self.live.surface.error_body(
                502, "the model app's stream ended before its answer was complete", "model_app_error"
            )
        ]

    def relayed(self, chunk: bytes, offered: bool = False) -> bytes:
        """What the client gets now of one more chunk of the round's stream; a failure is noted, not raised.
        `offered`: `pass_on` declined it already (`send`'s lane)."""
        self.size += len(chunk)
        if self.size > self.limit:
            message = f"the model app's answer was over max_body_bytes={self.limit}"
            self.failure = self.live.surface.error_body(502, message, "model_app_error")
            return b""
        out: list[bytes] = []
        try:
            assert self.reader is not None
            self.live.relay.read(self.reader, chunk, out, offered)
        except Exception as error:
            self.unreadable(error)
        return out[0] if len(out) == 1 else b"".join(out)  # what came before a failure went out

    def unreadable(self, error: Exception) -> None:
        """Note the failure a chunk's reading raised: the app's error event, or a stream that cannot be read."""
        self.idle = False
        if isinstance(error, AppStreamError):
            self.failure, self.failure_status = error.body, error.status
            return
        message = f"the model app's stream could not be read: {type(error).__name__}: {error}"
        self.failure = self.live.surface.error_body(502, message, "model_app_error")
