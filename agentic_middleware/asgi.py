"""Small ASGI pieces the middleware is built from: body reading, replay, headers, response capture."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable

import orjson
from starlette.types import Message, Receive, Scope, Send

from .sniff import (
    EVENTS,
    JSON,
    OTHER,
    SNIFF_BYTES,
    encoding_of,
    is_event_stream,
    is_json,
    sniffable,
    sniffed,
    unjudged_reason,
)
from .sniff import media_type as media_type  # where it was, for its importers

Headers = list[tuple[bytes, bytes]]

_LENGTH_HEADERS = (b"content-length", b"transfer-encoding")
_SPACE = b" \t\r\n"  # JSON's white space
_SPACES = b" \t"
_JSON_TYPE = (b"content-type", b"application/json")
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


async def read_body(receive: Receive, limit: int) -> tuple[bytes, bool] | None:
    """The request body and whether it is complete: reading stops once it is over `limit` bytes.

    None when the client disconnected before sending it all.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), True
        if size > limit:
            return b"".join(chunks), False


def replay(body: bytes, receive: Receive, more_body: bool = False) -> Receive:
    """A `receive` that gives `body` once, then `receive`: the rest of the body, and disconnects."""
    pending = True

    async def receive_body() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": more_body}
        return await receive()

    return receive_body


def with_length(headers: Headers, length: int) -> Headers:
    """The headers with one content-length for a body of `length` bytes."""
    kept = [(name, value) for name, value in headers if name.lower() not in _LENGTH_HEADERS]
    return [*kept, (b"content-length", str(length).encode())]


def without_length(headers: Headers) -> Headers:
    """The headers without a content-length (or transfer-encoding): the server frames a body of unknown length."""
    return [(name, value) for name, value in headers if name.lower() not in _LENGTH_HEADERS]


def scope_with_body_length(scope: Scope, length: int) -> Scope:
    """A copy of `scope` whose content-length fits a body of `length` bytes."""
    return {**scope, "headers": with_length(scope["headers"], length)}


def scope_unencoded(scope: Scope) -> Scope:
    """A copy of `scope` without `accept-encoding`: the answer is to be read on its way out, so it must not be
    compressed (an app that forwards the client's headers upstream would otherwise get and relay a gzip body)."""
    return {
        **scope,
        "headers": [(name, value) for name, value in scope["headers"] if name.lower() != b"accept-encoding"],
    }


def json_start(status: int, length: int, extra: Iterable[tuple[bytes, bytes]] = ()) -> Message:
    """The start of a JSON response the middleware writes itself."""
    headers = [_JSON_TYPE, (b"content-length", str(length).encode()), *extra]
    return {"type": "http.response.start", "status": status, "headers": headers}


def is_readable_json(start: Message) -> bool:
    """A 2xx, unencoded JSON answer without trailers: the only kind the middleware reads."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return False
    kind, encoded = media_type(start.get("headers", ()))
    return not encoded and is_json(kind)


class ResponseCapture:
    """The `send` of one internal call: buffers a readable JSON answer, forwards anything else.

    Anything that is not a 2xx JSON body, or a body over `limit` bytes, goes to
    the client as the app sends it, chunk by chunk (with `forward_headers` added
    to its start); `forwarded` records that the client has an answer, and
    `on_forward` is called when forwarding begins. Without `forward`, nothing
    goes to the client: other answers are kept too, and `readable` tells them apart.
    A 2xx answer whose type is absent or neither JSON nor an event stream is held until its first bytes tell
    what it is (sniff.py): a JSON object is read as JSON. An event stream (typed so, or told by its first bytes)
    to a call that did not stream is read whole by `read_stream` into the JSON answer it accumulates to; a
    gzip or deflate answer is decoded whole, then read as its type or first bytes say. `unjudged` says why a
    2xx answer was not readable; `refused` why one that may hold a call cannot be judged (the call fails).
    """

    heard = False  # a live round's stream sent the client an event (`live.RoundCapture`): a retry could repeat it
    kept: frozenset[int] = frozenset()  # statuses kept, not forwarded: a rerun's, which the loop may retry

    def __init__(
        self,
        send: Send,
        forward_headers: Headers,
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
        if self.forward_headers:
            start = {**start, "headers": [*start.get("headers", ()), *self.forward_headers]}
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
                start, body = {**start, "status": 502}, answer
            else:
                body = orjson.dumps(answer)
                self.readable = True
            start = {**start, "headers": [*_decoded_headers(start, b"content-type"), _JSON_TYPE]}
        else:
            start = {**start, "headers": _decoded_headers(start)}
        self.start = {**start, "headers": with_length(start["headers"], len(body))}
        self.chunks = [body]
        self.rewritten = True

    @property
    def body(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
