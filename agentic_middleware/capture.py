"""The `send` of one internal call (`ResponseCapture`): what of the app's answer goes to the client, and what is kept.

A readable answer is held for the loop; anything else goes to the client as the app sends it, chunk by chunk; once
the client's response has begun, everything is kept. How a held answer is read (sniffed, decoded, an event stream
accumulated) is `reading.AnswerReading`, its base.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from starlette.types import Message, Send

from .asgi import Headers, is_readable_json
from .reading import AnswerReading, encoding_to_read
from .sniff import is_event_stream, sniffable, unjudged_reason


class ResponseCapture(AnswerReading):
    """The `send` of one internal call: buffers a readable JSON answer, forwards anything else.

    Anything that is not a 2xx JSON body, or a body over `limit` bytes, goes to
    the client as the app sends it, chunk by chunk (with the headers `forward_headers` gives then added
    to its start); `forwarded` records that the client has an answer, and
    `on_forward` is called when forwarding begins. Without `forward`, nothing
    goes to the client: other answers are kept too, and `readable` tells them apart.
    A 2xx answer whose type is absent or neither JSON nor an event stream is held until its first bytes tell
    what it is (sniff.py): a JSON object is read as JSON. An event stream (typed so, or told by its first bytes)
    to a call that did not stream is read whole by `read_stream` into the JSON answer it accumulates to; a
    gzip or deflate answer is decoded whole, then read as its type or first bytes say. `unjudged` says why a
    2xx answer was not readable; `refused` why one that may hold a call cannot be judged (the call fails).
    """

    heard = False  # a live round's stream sent the client an event (`live_round.RoundCapture`): a retry could repeat it
    kept: frozenset[int] = frozenset()  # statuses kept, not forwarded: a rerun's, which the loop may retry

    def __init__(
        self,
        send: Send,
        forward_headers: Callable[[], Headers] | None,
        limit: int,
        on_forward: Callable[[], object] | None = None,
        forward: bool = True,
        read_stream: Callable[[bytes], object] | None = None,
    ) -> None:
        self.client_send = send
        self.forward_headers = forward_headers
        self.forward_allowed = forward  # False once the client's response has begun: keep everything
        self.readable = True
        self.limit = limit
        self.on_forward = on_forward
        self.read_stream = read_stream
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.forwarded = False
        self.oversize = False
        self.sniffing = False  # the start is held until the body's first bytes tell what it is
        self.lead = 0  # white space opening a body being sniffed: it does not count against SNIFF_BYTES
        self.spaced = False  # that white space holds a space or a tab (no event stream opens so)
        self.held: bytearray | None = None  # the first bytes after it, while sniffing
        self.stream = False  # an event stream to a call that did not stream: held whole, read at its end
        self.encoding: bytes | None = None  # the content-encoding of an answer held whole to be decoded
        self.rewritten = False  # `start` and the body are no longer the app's bytes: the length is fitted
        self.unjudged: str | None = None
        self.refused: str | None = None

    async def forward(self, start: Message) -> None:
        self.forwarded = True
        if self.on_forward is not None:
            self.on_forward()
        headers = self.forward_headers() if self.forward_headers is not None else None
        if headers:
            start = {**start, "headers": [*start.get("headers", ()), *headers]}
        await self.client_send(start)

    async def send(self, message: Message) -> None:
        if self.forwarded:
            await self.client_send(message)
        elif message["type"] == "http.response.start":
            judging = self.read_stream is not None  # None: a call no hook judges (the guardrails judged the request)
            self.readable = is_readable_json(message)
            self.stream = judging and not self.readable and is_event_stream(message)
            self.encoding = None if not judging or self.readable or self.stream else encoding_to_read(message)
            self.sniffing = not (self.readable or self.stream) and self.encoding is None and sniffable(message)
            held = self.readable or self.stream or self.sniffing or self.encoding is not None
            if held or not self.forward_allowed or message["status"] in self.kept:
                self.start = message
            else:
                await self.forward(message)
            if not held and judging:
                self.unjudged = unjudged_reason(message)
        elif message["type"] == "http.response.body" and self.start is not None and not self.oversize:
            chunk = message.get("body", b"")
            self.chunks.append(chunk)
            self.size += len(chunk)
            self.complete = not message.get("more_body", False)
            if self.sniffing and not await self.sniffed(chunk):
                return
            if self.size > self.limit:
                self.oversize = True
                if self.forward_allowed:
                    await self.forward(self.start)
                    await self.client_send({**message, "body": self.body})
            elif self.complete and (self.stream or self.encoding is not None):
                await self.settle()


class Captures(Protocol):
    """What reads each round of a call itself (`live.LiveStream`): the `send` of one call, as `ResponseCapture`'s."""

    def capture(
        self,
        send: Send,
        forward_headers: Callable[[], Headers] | None,
        limit: int,
        on_forward: Callable[[], object] | None = None,
        forward: bool = True,
        read_stream: Callable[[bytes], object] | None = None,
    ) -> ResponseCapture: ...
