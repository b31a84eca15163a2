"""Small ASGI pieces the middleware is built from: body reading, replay, headers, response capture."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.types import Message, Receive, Scope, Send

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


def scope_with_body_length(scope: Scope, length: int) -> Scope:
    """A copy of `scope` whose content-length fits a body of `length` bytes."""
    return {**scope, "headers": with_length(scope["headers"], length)}


def json_start(status: int, length: int, extra: Iterable[tuple[bytes, bytes]] = ()) -> Message:
    """The start of a JSON response the middleware writes itself."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode()), *extra]
    return {"type": "http.response.start", "status": status, "headers": headers}


def media_type(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The content type without parameters, lowercase, and whether a content-encoding applies."""
    kind, encoded = b"", False
    for name, value in headers:
        name = name.lower()
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
        elif name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            encoded = True
    return kind, encoded


def is_readable_json(start: Message) -> bool:
    """A 2xx, unencoded JSON answer without trailers: the only kind the middleware reads."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return False
    kind, encoded = media_type(start.get("headers", ()))
    return not encoded and (kind == b"application/json" or kind.endswith(b"+json"))


class ResponseCapture:
    """The `send` of one internal call: buffers a readable JSON answer, forwards anything else.

    Anything that is not a 2xx JSON body, or a body over `limit` bytes, goes to
    the client as the app sends it, chunk by chunk (with `forward_headers` added
    to its start); `forwarded` records that the client has an answer, and
    `on_forward` is called when forwarding begins. Without `forward`, nothing
    goes to the client: other answers are kept too, and `readable` tells them apart.
    """

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
            if self.readable or not self.forward_allowed:
                self.start = message
            else:
                await self.forward(message)
        elif message["type"] == "http.response.body" and self.start is not None and not self.oversize:
            chunk = message.get("body", b"")
            self.chunks.append(chunk)
            self.size += len(chunk)
            self.complete = not message.get("more_body", False)
            if self.size > self.limit:
                self.oversize = True
                if self.forward_allowed:
                    await self.forward(self.start)
                    await self.client_send({**message, "body": self.body})

    @property
    def body(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
