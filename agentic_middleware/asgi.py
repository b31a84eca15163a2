"""Small ASGI pieces the middleware is built from: body reading, replay, headers, response capture."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.types import Message, Receive, Scope, Send

from .sniff import EVENTS, JSON, OTHER, SNIFF_BYTES, is_json, sniffable, sniffed, unjudged_reason
from .sniff import media_type as media_type  # where it was, for its importers

Headers = list[tuple[bytes, bytes]]

_LENGTH_HEADERS = (b"content-length", b"transfer-encoding")


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
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode()), *extra]
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
    what it is (sniff.py): a JSON object is read as JSON. `unjudged` says why a 2xx answer was not readable.
    """

    events = False  # whether an answer that turns out to be an event stream can be read as one (`as_event_stream`)
    heard = False  # a live round's stream gave its relay an event (`live.RoundCapture`): a retry could repeat it
    kept: frozenset[int] = frozenset()  # statuses kept, not forwarded: a rerun's, which the loop may retry

    def __init__(
        self,
        send: Send,
        forward_headers: Headers,
        limit: int,
        on_forward: Callable[[], object] | None = None,
        forward: bool = True,
    ) -> None:
        self.client_send = send
        self.forward_headers = forward_headers
        self.forward_allowed = forward  # False once the client's response has begun: keep everything
        self.readable = True
        self.limit = limit
        self.on_forward = on_forward
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.forwarded = False
        self.oversize = False
        self.sniffing = False  # the start is held until the body's first bytes tell what it is
        self.unjudged: str | None = None

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
            self.readable = is_readable_json(message)
            self.sniffing = not self.readable and sniffable(message)
            if self.readable or self.sniffing or not self.forward_allowed or message["status"] in self.kept:
                self.start = message
            else:
                await self.forward(message)
            if not (self.readable or self.sniffing):
                self.unjudged = unjudged_reason(message)
        elif message["type"] == "http.response.body" and self.start is not None and not self.oversize:
            chunk = message.get("body", b"")
            self.chunks.append(chunk)
            self.size += len(chunk)
            self.complete = not message.get("more_body", False)
            if self.sniffing and not await self.sniffed():
                return
            if self.size > self.limit:
                self.oversize = True
                if self.forward_allowed:
                    await self.forward(self.start)
                    await self.client_send({**message, "body": self.body})

    async def sniffed(self) -> bool:
        """Decide what a held answer is, once its first bytes tell; False while they do not yet, or when the
        answer went another way (forwarded, or read as an event stream)."""
        assert self.start is not None
        kind = sniffed(self.body[:SNIFF_BYTES], self.complete, self.events)
        if kind is None:
            return False
        self.sniffing = False
        if kind == JSON:
            self.readable = True
            return True
        if kind == EVENTS:
            await self.as_event_stream()
            return False
        assert kind == OTHER
        self.unjudged = unjudged_reason(self.start)
        if not self.forward_allowed:
            return True  # kept, unreadable
        await self.forward(self.start)
        await self.client_send({"type": "http.response.body", "body": self.body, "more_body": not self.complete})
        return False

    async def as_event_stream(self) -> None:
        """Read the answer held so far, and the rest, as an event stream: only a capture whose `events` is True
        (a live round's) is ever asked to."""
        raise AssertionError("this capture does not read event streams")

    @property
    def body(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
