"""Small ASGI pieces the middleware is built from: body reading, replay, headers, JSON starts.

The `send` that captures an internal call's answer is in `capture.py`; how a held answer is read in `reading.py`.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Message, Receive, Scope, Send

from .sniff import is_json
from .sniff import media_type as media_type  # where it was, for its importers

Headers = list[tuple[bytes, bytes]]

_LENGTH_HEADERS = (b"content-length", b"transfer-encoding")
JSON_TYPE = (b"content-type", b"application/json")


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
    return Replay(body, receive, more_body)


class Replay:
    """`replay`'s `receive`. An object with slots, not a closure (a function and its four cells), and the body is
    let go once given: the app holds its `receive` for as long as its call lasts, a live stream's whole round, and a
    gateway holds thousands of them (benchmarks case 12)."""

    __slots__ = ("body", "more_body", "receive")

    def __init__(self, body: bytes, receive: Receive, more_body: bool) -> None:
        self.body: bytes | None = body
        self.receive = receive
        self.more_body = more_body

    async def __call__(self) -> Message:
        body = self.body
        if body is None:
            return await self.receive()
        self.body = None
        return {"type": "http.request", "body": body, "more_body": self.more_body}


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
    headers = [JSON_TYPE, (b"content-length", str(length).encode()), *extra]
    return {"type": "http.response.start", "status": status, "headers": headers}


async def send_json(send: Send, status: int, body: bytes) -> None:
    """A whole JSON response the middleware writes itself (an error in the route's shape, a record)."""
    await send(json_start(status, len(body)))
    await send({"type": "http.response.body", "body": body})


def is_readable_json(start: Message) -> bool:
    """A 2xx, unencoded JSON answer without trailers: the only kind the middleware reads."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return False
    kind, encoded = media_type(start.get("headers", ()))
    return not encoded and is_json(kind)
