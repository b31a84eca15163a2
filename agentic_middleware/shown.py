"""Ids of internal responses, never shown: the `send` that replaces them, wherever they appear, with the id the
client knows.

A Responses turn makes responses the client never gets the ids of: a follow-up rewritten by the chain store
chains from the turn's last response (chains.py), and a looped turn's other rounds are stored too. The app names
them where it likes (its error messages, "Previous response with id 'resp_...' not found.", a header, a nested
string), so every occurrence that does not go on as a longer id is replaced, in header values and every body
(JSON, event streams, text, untyped), on every path: passed through, looped, live. A body is only searched (`bytes
in`, no parse) for the few ids this request knows of; only a body that holds one is copied; a live stream's text
delta that its relay passed on unread (its lane), only from its string on. A rewritten follow-up is sent without
`accept-encoding` (asgi.scope_unencoded); an answer the app compresses anyway cannot be read, so it goes as the app
sent it.
"""

from __future__ import annotations

from starlette.types import Message, Send

from .asgi import media_type, with_length, without_length
from .surfaces.responses_relay import ResponsesRelay

_ID_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_ID_BYTES = frozenset(_ID_CHARS)


class ShownIds:
    """The client's `send` for one request on a Responses route: `hide(internal, shown)` names an id to replace.

    A JSON body is held until it is whole and given its new length (when an id is hidden by its start: the loop
    names its rounds before it answers), up to `limit` bytes; past that, and for every other body (event streams,
    text, no type), what arrives goes out at once but for its last few bytes when they could begin an id, held
    until the next chunk or the end, and the `content-length` is dropped (a replacement may change the length). So
    an id cut across two chunks is still found, an event is never held for the next one, and nothing is held whole
    past the limit. A live stream's later rounds are named while it runs, each before any event of its own."""

    def __init__(self, send: Send, limit: int) -> None:
        self.send = send
        self.limit = limit
        self.hidden: dict[bytes, bytes] = {}
        self.rounds: list[str] = []  # the ids of a looped turn's rounds, in order
        # A live turn: its relay names each round here as the round starts (`follow`). The relay is not held: it holds
        # this, and a cycle between them would keep both until a full collection, long after the stream ended.
        self.live = False
        self.start: Message | None = None  # a JSON answer's start, held until its body is whole
        self.chunks: list[bytes] = []
        self.size = 0  # the bytes held in `chunks`
        self.searched = False  # the body is searched as it goes
        self.tail = b""  # the body's last bytes that could begin an id, held until the next chunk
        self.plain = True  # not content-encoded
        self.firsts: tuple[int, int, tuple[bytes, ...]] = (0, 0, ())  # for that many ids: the longest's length, their
        # first bytes (`_held`)
        self.lane: bytes | None = None  # the relay's open lane, as `needles` were worked out for it
        self.lane_ids = 0  # and for that many hidden ids
        self.needles: tuple[bytes, ...] | None = None  # what to look for in its deltas' strings (`_lane_needles`)

    def hide(self, internal: str, shown: str) -> None:
        """Show `shown` wherever `internal` would be; an id already hidden keeps its first replacement."""
        if internal != shown and internal:
            self.hidden.setdefault(internal.encode(), shown.encode())

    def follow(self, relay: object) -> None:
        """A live turn: the relay names each round (`round`) as soon as its stream does, before any of the round's
        events goes out, so that nothing is looked up again for each event (`passes`)."""
        if isinstance(relay, ResponsesRelay):
            self.live = True
            relay.names = self

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

    def shown(self, data: bytes, after: int | None = None) -> bytes:
        """`data` with every hidden id replaced (a byte search per id; nothing is copied when none is there);
        `after` is the byte that follows `data`, None at the end of the body."""
        for internal, shown in self.hidden.items():
            if internal in data:
                data = _replaced(data, internal, shown, after)
        return data

    def passes(self, body: bytes, relay: object) -> bool:
        """Whether a body chunk goes to the server's `send` as it is: no id to hide yet, or a text delta the `relay`
        passed on by its lane (`TextLane.passed`) whose string holds none. A plain check, so that a live stream's lane
        (live_round.py) writes such a chunk straight to the server's `send`, not through this one's coroutine (most
        of a live stream's events)."""
        if not self.hidden:
            # No id to hide yet (a live stream's first round: the relay names a later one before its events, `round`),
            # so nothing held (`start` holds a JSON answer only once an id is hidden, `tail` only what could begin
            # one): the body goes as it came, at the cost of this check alone.
            return True
        if isinstance(relay, ResponsesRelay) and body is relay.passed and self.searched and not self.tail:
            # A text delta the relay passed on by its lane (most of a live stream's later rounds): its bytes before its
            # string are known (`_lane_needles`), so a byte search from its string on for what the ids begin with
            # tells whether it holds one (about a tenth of the search in `__call__`).
            if self.lane is not relay.lane_moved or self.lane_ids != len(self.hidden):
                self._lane_needles(relay)
            needles = self.needles
            if needles is not None:
                at = relay.passed_at
                for needle in needles:
                    if body.find(needle, at) >= 0:
                        break  # searched as any chunk (a generator in `all` would cost more than the search)
                else:
                    return True
        return False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not self.hidden:  # nothing to hide, nothing held (`passes`)
            await self.send(message)
            return
        if message["type"] == "http.response.start":
            headers = message.get("headers", ())
            kind, encoded = media_type(headers)
            self.plain = not encoded
            if self.hidden:
                message = {**message, "headers": [(name, self.shown(value)) for name, value in headers]}
            if self.hidden and self.plain and (kind == b"application/json" or kind.endswith(b"+json")):
                self.start = message
                return
            # An event stream is searched even before any id is hidden: a buffered stream begins (with keep-alives)
            # before its rounds answer, and a live one before its later rounds start.
            stream = kind == b"text/event-stream"
            self.searched = self.plain and (bool(self.hidden) or self.live or stream)
            if self.searched:
                message = {**message, "headers": without_length(message.get("headers", ()))}
        elif message["type"] == "http.response.body" and self.plain:
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if self.start is not None:
                self.chunks.append(body)
                self.size += len(body)
                if more and self.size <= self.limit:
                    return
                body, self.chunks = b"".join(self.chunks), []
                start, self.start = self.start, None
                if not more:
                    body = self.shown(body)
                    await self.send({**start, "headers": with_length(start.get("headers", ()), len(body))})
                    await self.send({**message, "body": body})
                    return
                await self.send({**start, "headers": without_length(start.get("headers", ()))})
                self.searched = True  # over the limit: searched as it goes from here on
            if self.searched:
                body = self.tail + body
                cut = self._held(body) if more else len(body)
                body, self.tail = body[:cut], body[cut:]
                if not body and more:
                    return
                message = {**message, "body": self.shown(body, body_after(self.tail))}
        await self.send(message)

    def _lane_needles(self, relay: ResponsesRelay) -> None:
        """What to look for in a delta of the relay's open lane, from its string on (`passed_at`: its text, then its
        end and OpenAI's `obfuscation` padding), so that no hidden id in it is missed: the ids' common start when it
        is as long as OpenAI's `resp_` (one search for them all), else each id. None when an id could be in the
        bytes before the string, which are the same for every delta of the lane but for its number's digits
        (`lane_spelling`), or across its quotes: an id that is in them, is all digits, or holds a byte no id of the
        API has (`_ID_BYTES`); then each delta is searched as any chunk is. Worked out once a lane, and again when
        an id was hidden since."""
        self.lane, self.lane_ids = relay.lane_moved, len(self.hidden)
        spelling = relay.lane_spelling()
        ids = tuple(self.hidden)
        if any(i.translate(None, _ID_CHARS) or i.isdigit() or any(i in spelled for spelled in spelling) for i in ids):
            self.needles = None
            return
        common = _common_start(ids)
        self.needles = (common,) if len(common) >= len(b"resp_") else ids

    def _held(self, data: bytes) -> int:
        """Where the part of `data` that could begin a hidden id (or end with a whole one, whose next byte tells
        whether it is a whole word) starts; `len(data)` when none could. Only the last bytes, as many as the
        longest id has, are looked at, and only where an id's first byte is."""
        if not self.hidden:
            return len(data)
        held = len(data)
        if self.firsts[0] != len(self.hidden):  # an id hidden since: its first byte and length counted once
            firsts = tuple({internal[:1] for internal in self.hidden})
            self.firsts = (len(self.hidden), max(map(len, self.hidden)), firsts)
        _, longest, firsts = self.firsts
        begin = max(0, held - longest)
        for first in firsts:
            at = data.find(first, begin, held)
            while at != -1:
                if any(internal.startswith(data[at:]) for internal in self.hidden):
                    held = at
                    break
                at = data.find(first, at + 1, held)
        return held


def _common_start(ids: tuple[bytes, ...]) -> bytes:
    """The bytes every one of `ids` begins with (those the least and the greatest of them share)."""
    first, last = (min(ids), max(ids)) if ids else (b"", b"")
    size = 0
    while size < len(first) and first[size] == last[size]:
        size += 1
    return first[:size]


def body_after(tail: bytes) -> int | None:
    """The byte after what goes out now: the first held one, None when nothing is held (the end of the body)."""
    return tail[0] if tail else None


def _replaced(data: bytes, internal: bytes, shown: bytes, after: int | None = None) -> bytes:
    """`data` with `internal` replaced by `shown` where it does not go on as a longer id (not followed by another id
    character; `after` is the byte that follows `data`). What comes before does not count: an id follows a JSON
    escape (`\\n`, `\\u0027`), a percent-encoded quote (`%22`) or a word as readily as a space, and ids do not end
    in one another."""
    parts: list[bytes] = []
    start = 0
    at = data.find(internal)
    while at != -1:
        end = at + len(internal)
        following = data[end] if end < len(data) else after
        if following is None or following not in _ID_BYTES:
            parts += (data[start:at], shown)
            start = end
        at = data.find(internal, end if start == end else at + 1)
    return b"".join([*parts, data[start:]]) if parts else data
