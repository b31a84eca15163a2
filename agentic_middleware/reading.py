"""What a held answer of the model app is: sniffed from its first bytes, decoded, an event stream read into JSON.

`AnswerReading` is the judging half of `capture.ResponseCapture`, which it is the base of: the capture holds an
answer it may have to read (by its type, or while its first bytes tell), and the methods here decide what it is
and turn it into the JSON answer the loop reads; what goes to the client, and when, is the capture's side.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

import orjson
from starlette.types import Message, Send

from .asgi import JSON_TYPE, Headers, with_length
from .error_types import error_status
from .sniff import EVENTS, JSON, OTHER, SNIFF_BYTES, encoding_of, is_json, media_type, sniffed, unjudged_reason

_SPACE = b" \t\r\n"  # JSON's white space
_SPACES = b" \t"
_DECODERS = {b"gzip": 31, b"x-gzip": 31, b"deflate": 15}  # zlib's wbits for each content-coding


def encoding_to_read(start: Message) -> bytes | None:
    """The content-encoding of a 2xx answer without trailers, which is held whole to be decoded and judged (an
    encoding the middleware cannot decode is refused there, never passed on unjudged); None when unencoded."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return None
    return encoding_of(start.get("headers", ()))


def decoded(body: bytes, encoding: bytes, limit: int) -> bytes:
    """`body` decoded from `encoding` (gzip or deflate, as zlib reads them; deflate with or without its zlib
    header), at most `limit` bytes of it. Raises ValueError for anything else, or a body that does not decode."""
    codings = [coding.strip() for coding in encoding.split(b",") if coding.strip() not in (b"", b"identity")]
    for coding in reversed(codings):  # the last coding applied is undone first
        if coding not in _DECODERS:
            raise ValueError(f"{coding.decode(errors='replace')} is not an encoding the middleware decodes")
        wbits = _DECODERS[coding]
        try:
            decoder = zlib.decompressobj(wbits)
            out = decoder.decompress(body, limit + 1)
        except zlib.error:
            if coding != b"deflate":
                raise ValueError(f"it is not valid {coding.decode()}") from None
            try:  # raw deflate, as some servers send it
                decoder = zlib.decompressobj(-15)
                out = decoder.decompress(body, limit + 1)
            except zlib.error as error:
                raise ValueError(f"it is not valid deflate: {error}") from None
        if len(out) > limit or decoder.unconsumed_tail:
            raise ValueError(f"decoded, it is over max_body_bytes={limit}")
        if not decoder.eof:
            raise ValueError(f"its {coding.decode()} data ends early")
        body = out
    return body


def _decoded_headers(start: Message, *also: bytes) -> Headers:
    """The headers of an answer without its content-encoding and length (and the `also` named)."""
    dropped = (b"content-encoding", b"content-length", b"transfer-encoding", *also)
    return [(name, value) for name, value in start.get("headers", ()) if name.lower() not in dropped]


class AnswerReading:
    """The state of an answer held to be read, and the methods that read it; every attribute is set by
    `ResponseCapture.__init__`."""

    client_send: Send
    forward_allowed: bool
    limit: int
    read_stream: Callable[[bytes], object] | None
    start: Message | None
    chunks: list[bytes]
    size: int
    complete: bool
    readable: bool
    sniffing: bool
    lead: int
    spaced: bool
    held: bytearray | None
    stream: bool
    encoding: bytes | None
    rewritten: bool
    unjudged: str | None
    refused: str | None
    # Begins the client's answer with a start message: the capture's side (`ResponseCapture.forward`).
    forward: Callable[[Message], Awaitable[None]]

    async def sniffed(self, chunk: bytes) -> bool:
        """Decide what a held answer is, once its first bytes tell; False while they do not yet, or when the
        answer went another way (forwarded, or read as an event stream as it comes)."""
        assert self.start is not None
        if self.held is None:  # white space so far: it is held however long, and tells nothing yet
            rest = chunk.lstrip(_SPACE)
            self.spaced = self.spaced or any(byte in _SPACES for byte in chunk[: len(chunk) - len(rest)])
            self.lead += len(chunk) - len(rest)
            if not rest and not self.complete:
                return self.size > self.limit  # only the limit ends the wait
            self.held = bytearray()
            chunk = rest
        self.held += chunk[: SNIFF_BYTES - len(self.held)]
        opening = (b" " if self.spaced else b"\n") if self.lead else b""
        kind = sniffed(opening + bytes(self.held), self.complete)
        if kind is None:
            return False
        self.sniffing = False
        if kind == JSON:
            self.readable = True
            return True
        if kind == EVENTS:
            return await self.as_event_stream()
        assert kind == OTHER
        self.unjudged = unjudged_reason(self.start)
        if not self.forward_allowed:
            return True  # kept, unreadable
        await self.forward(self.start)
        await self.client_send({"type": "http.response.body", "body": self.body, "more_body": not self.complete})
        return False

    async def as_event_stream(self) -> bool:
        """The answer's first bytes are an event stream's though its type did not say: held whole and read at its
        end, here (a call that did not stream); True: the capture goes on holding it."""
        assert self.start is not None
        if self.read_stream is None:  # a call no hook judges: its stream goes on as it comes
            await self.forward(self.start)
            await self.client_send({"type": "http.response.body", "body": self.body, "more_body": not self.complete})
            return False
        self.readable = False
        self.stream = True
        if self.complete:
            await self.settle()
        return True

    async def settle(self) -> None:
        """A whole answer held to be read: decoded if it is encoded, then judged by its type or first bytes, an
        event stream as the JSON answer it accumulates to. One that could hold a call but cannot be read is
        `refused`; one that is neither goes on as the app sent it."""
        assert self.start is not None
        body = self.body
        start = self.start
        if self.encoding is not None:
            try:
                body = decoded(body, self.encoding, self.limit)
            except ValueError as error:
                self.readable = False
                self.refused = f"the model app's answer is content-encoded and could not be read: {error}"
                return
            kind = media_type(start.get("headers", ()))[0]
            self.stream = kind == b"text/event-stream" or (
                not is_json(kind) and sniffed(body[:SNIFF_BYTES].lstrip(_SPACE) or b" ", True) == EVENTS
            )
            self.readable = not self.stream and (is_json(kind) or sniffed(body.lstrip(_SPACE)[:1], True) == JSON)
            if not (self.readable or self.stream):
                self.unjudged = unjudged_reason({**start, "headers": _decoded_headers(start)})
                self.readable = False
                if self.forward_allowed:  # neither: the app's bytes, as it sent them
                    await self.forward(start)
                    await self.client_send({"type": "http.response.body", "body": self.body})
                return
        self.encoding = None
        if self.stream:
            self.stream = False
            self.readable = False
            if self.read_stream is None:
                self.refused = "the model app answered a call that did not stream with an event stream"
                return
            try:
                answer = self.read_stream(body)
            except Exception as error:
                problem = f"{type(error).__name__}: {error}"
                self.refused = f"the model app answered a call that did not stream with an event stream: {problem}"
                return
            if isinstance(answer, bytes):  # the stream's own error event, as the route's error body
                start, body = {**start, "status": error_status(answer)}, answer
            else:
                body = orjson.dumps(answer)
                self.readable = True
            start = {**start, "headers": [*_decoded_headers(start, b"content-type"), JSON_TYPE]}
        else:
            start = {**start, "headers": _decoded_headers(start)}
        self.start = {**start, "headers": with_length(start["headers"], len(body))}
        self.chunks = [body]
        self.rewritten = True

    @property
    def body(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
