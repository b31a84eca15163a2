"""Ids of internal responses, never shown: the `send` that replaces them, wherever they appear, with the id the
client knows.

A Responses turn makes responses the client never gets the ids of: a follow-up rewritten by the chain store
chains from the turn's last response (chains.py), and a looped turn's other rounds are stored too. The app names
them where it likes (its error messages, "Previous response with id 'resp_...' not found.", a header, a nested
string), so every occurrence is replaced as a whole word (not inside a longer id) in header values, JSON bodies
and event streams, on every path: passed through, looped, live. A body is only searched (`bytes in`, no parse)
for the few ids this request knows of; only a body that holds one is copied. An answer with a
content-encoding cannot be read, so it goes as the app sent it (apps behind the middleware do not compress; the
gateway's compression comes after it).
"""

from __future__ import annotations

from starlette.types import Message, Send

from .asgi import media_type, with_length
from .surfaces.responses_relay import ResponsesRelay

_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class ShownIds:
    """The client's `send` for one request on a Responses route: `hide(internal, shown)` names an id to replace.

    A JSON body is held until it is whole and given its new length (when an id is hidden by its start: the loop
    names its rounds before it answers); an event stream goes out up to its last line end (an id never spans one),
    the rest held until the next chunk or the end (a live stream's later rounds are named while it runs)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.hidden: dict[bytes, bytes] = {}
        self.rounds: list[str] = []  # the ids of a looped turn's rounds, in order
        self.relay: ResponsesRelay | None = None  # a live turn's relay, which names each round as it starts
        self.followed = 0  # how many of the relay's round ids are taken
        self.start: Message | None = None  # a JSON answer's start, held until its body is whole
        self.chunks: list[bytes] = []
        self.stream = False
        self.tail = b""  # an event stream's last partial line
        self.plain = True  # not content-encoded

    def hide(self, internal: str, shown: str) -> None:
        """Show `shown` wherever `internal` would be; an id already hidden keeps its first replacement."""
        if internal != shown and internal:
            self.hidden.setdefault(internal.encode(), shown.encode())

    def follow(self, relay: object) -> None:
        """A live turn: each round's id is taken from the relay as soon as its stream names it."""
        if isinstance(relay, ResponsesRelay):
            self.relay = relay

    def round(self, response_id: object, relay: object) -> None:
        """A looped turn's round answered with `response_id`; `relay` is the turn's live relay, if any. The client
        gets one id for the turn: the one a live stream's `response.created` carried, else the last round's; every
        other round's shows as that."""
        if not isinstance(response_id, str) or not response_id or response_id in self.rounds:
            return
        self.rounds.append(response_id)
        shown = response_id
        if isinstance(relay, ResponsesRelay) and relay.started and isinstance(relay.response_id, str):
            shown = relay.response_id
        for internal in self.rounds:
            if internal != shown:
                self.hidden[internal.encode()] = shown.encode()

    def shown(self, data: bytes) -> bytes:
        """`data` with every hidden id replaced (a byte search per id; nothing is copied when none is there)."""
        for internal, shown in self.hidden.items():
            if internal in data:
                data = _replaced(data, internal, shown)
        return data

    async def __call__(self, message: Message) -> None:
        if self.relay is not None and len(self.relay.round_ids) > self.followed:
            for response_id in self.relay.round_ids[self.followed :]:
                self.round(response_id, self.relay)
            self.followed = len(self.relay.round_ids)
        if message["type"] == "http.response.start":
            headers = message.get("headers", ())
            kind, encoded = media_type(headers)
            self.plain = not encoded
            if self.hidden:
                message = {**message, "headers": [(name, self.shown(value)) for name, value in headers]}
            if self.hidden and self.plain and (kind == b"application/json" or kind.endswith(b"+json")):
                self.start = message
                return
            self.stream = self.plain and kind == b"text/event-stream"
        elif message["type"] == "http.response.body" and self.plain:
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if self.start is not None:
                self.chunks.append(body)
                if more:
                    return
                body = self.shown(b"".join(self.chunks))
                start, self.start = self.start, None
                await self.send({**start, "headers": with_length(start.get("headers", ()), len(body))})
                message = {**message, "body": body}
            elif self.stream:
                body = self.tail + body
                cut = len(body) if not more else body.rfind(b"\n") + 1
                body, self.tail = body[:cut], body[cut:]
                if not body and more:
                    return
                message = {**message, "body": self.shown(body)}
            elif self.hidden:
                message = {**message, "body": self.shown(body)}
        await self.send(message)


def _replaced(data: bytes, internal: bytes, shown: bytes) -> bytes:
    """`data` with `internal` replaced by `shown` where it is a whole word: not next to another id character."""
    parts: list[bytes] = []
    start = 0
    at = data.find(internal)
    while at != -1:
        end = at + len(internal)
        if (at == 0 or data[at - 1] not in _ID_BYTES) and (end == len(data) or data[end] not in _ID_BYTES):
            parts += (data[start:at], shown)
            start = end
        at = data.find(internal, end if start == end else at + 1)
    return b"".join([*parts, data[start:]]) if parts else data
