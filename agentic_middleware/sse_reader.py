"""Reading a server-sent event stream as it arrives, by the event-stream rules of the HTML standard.

The model app's answer comes as ASGI body messages cut anywhere: an event may span several messages and
one message may hold several events. Lines end in LF, CRLF or CR (a CR that ends one message may be
followed by the LF that starts the next); one byte order mark may open the stream (even cut across
messages); comment lines (starting with ':') are dropped; a field's value is what follows its first ':',
less one leading space; the `data` lines of one event are joined with LF; an event without data is not
dispatched; `id` and `retry` are not kept, as nothing the loop does needs them.

The work is linear in the bytes read, however they are cut: each message is scanned once, and the start
of a line that has not ended yet is kept as a list of pieces, joined once when its line ends (joining and
splitting it again on every message made one 4 MB event in 1 KB messages cost seconds). `scanned` counts
that work, for tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

_BOM = b"\xef\xbb\xbf"


def whole_event(chunk: bytes, names: Mapping[bytes, str]) -> tuple[str, bytes] | None:
    """The name and data of `chunk` when it is one whole event whose `event` line is a key of `names`, in the one
    form a reader between two events reads as it came (`ServerSentEvent.raw`): that line, one `data` line, LF line
    ends only, one blank line at its end. A relay's lane reads such an event without a reader, as the reader would
    (`MessagesRelay.pass_on`, `ResponsesRelay.pass_on`); None for any other chunk (comments, `id` lines, CR, several
    or cut events, a name not known), which the reader reads."""
    line = chunk.find(b"\n")
    name = names.get(chunk[:line]) if line > 0 else None
    if (
        name is None
        or chunk[line : line + 7] != b"\ndata: "
        or not chunk.endswith(b"\n\n")
        or chunk.find(b"\n", line + 7, -2) >= 0  # one data line: no line ends within it (`find` is cheapest)
        or chunk.find(b"\r", line) >= 0
    ):
        return None
    return name, chunk[line + 7 : -2]


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event: its type (`""` when it had no `event` field) and its data, as bytes.

    `raw` is the event's own bytes when the stream wrote it in the one form `encode` writes (an `event` line in
    UTF-8, one `data` line, LF endings), so exactly what `encode` would write: a relay that passes the event on
    unchanged sends them as they came, with no copy.
    """

    event: str
    data: bytes
    raw: bytes = field(default=b"", compare=False, repr=False)

    def encode(self) -> bytes:
        """The event written back as the stream's bytes."""
        if self.raw:
            return self.raw
        data = b"data: " + self.data.replace(b"\n", b"\ndata: ") + b"\n\n"
        return b"event: " + self.event.encode() + b"\n" + data if self.event else data


def _simple(block: bytes, raw: bytes) -> ServerSentEvent | None:
    """The event of `block` (an event's lines, less the blank line that ends it, which `raw` has), when it is in the
    form `encode` writes: one `data` line after at most one `event` line; else None, for the line-by-line rules."""
    lines = block.count(b"\n")
    if lines == 0:
        return ServerSentEvent("", block[6:]) if block.startswith(b"data: ") else None
    head, data_line, data = block.partition(b"\ndata: ")
    if lines > 1 or not data_line or not head.startswith(b"event: ") or len(head) == 7:
        return None  # more lines, no data line second, or an empty type (which `encode` would not write)
    name = _NAMES.get(head)
    if name is None:
        try:
            name = head[7:].decode()
        except UnicodeDecodeError:
            return None  # the line-by-line rules decode it as the standard does (U+FFFD), and `encode` writes that
        if len(_NAMES) < 256:
            _NAMES[head] = name
    return ServerSentEvent(name, data, raw)


# Event types seen so far (by their whole `event` line), decoded once: a stream repeats a handful of them.
_NAMES: dict[bytes, str] = {}


class SSEReader:
    """Turns the chunks of one event stream into whole events; feed it every chunk in order."""

    __slots__ = ("after_cr", "data", "event", "head", "pending", "scanned")

    def __init__(self) -> None:
        self.head: bytes | None = b""  # the stream's first bytes, until a byte order mark is ruled out; then None
        # The pieces of a line not ended yet, and the data lines of the event under way: a list made for the first (a
        # reader lasts as long as its round, and most rounds never need either: two empty lists were two more objects
        # the collector tracks, for each of thousands of streams).
        self.pending: list[bytes] | None = None
        self.after_cr = False  # the last chunk ended in CR: an LF opening the next one ends nothing
        self.event = ""
        self.data: list[bytes] | None = None
        self.scanned = 0
        """Bytes read from chunks plus bytes copied to join a line's pieces: the reader's work, about one pass."""

    @property
    def between_events(self) -> bool:
        """Nothing of an event is under way: a chunk that is one whole event may be read without this reader."""
        return self.head is None and not (self.pending or self.data or self.event or self.after_cr)

    def begins(self, chunk: bytes) -> bool:
        """`chunk` begins between two events (`between_events`), so that one whole event in it may be read without this
        reader. At the stream's start that is so once its first byte rules a byte order mark out, which is noted as
        `feed` notes it; a chunk that may open with one is left to `feed`."""
        if self.head == b"" and chunk[:1] not in (b"", _BOM[:1]):
            self.head = None
        return self.between_events

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that `chunk` completes, in order."""
        if self.head == b"" and chunk[:1] not in (b"", _BOM[:1]):
            self.head = None  # the stream's first byte rules a byte order mark out
        if self.between_events and b"\r" not in chunk:
            # Between two events, as a stream that writes whole events leaves the reader: the whole events at the
            # chunk's start are cut at their blank lines, and only the rest is read line by line.
            if chunk.endswith(b"\n\n") and chunk.count(b"\n") <= 3:  # one event, the chunk of most streams
                event = _simple(chunk[:-2], chunk)
                if event is not None:
                    self.scanned += len(chunk)
                    return [event]
            end = chunk.rfind(b"\n\n") + 2
            if end > 1:
                self.scanned += len(chunk)
                events = self.blocks(chunk if end == len(chunk) else chunk[:end])
                if end < len(chunk):
                    events += self.lines(chunk[end:])
                return events
        if not chunk:
            return []
        if self.head is not None:  # the stream's start: one byte order mark may open it, in any number of chunks
            head = self.head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self.head = head
                return []
            self.head = None
            chunk = head.removeprefix(_BOM)
            if not chunk:
                return []
        self.scanned += len(chunk)
        if self.after_cr:
            self.after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self.after_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return self.lines(chunk)

    def blocks(self, whole: bytes) -> list[ServerSentEvent]:
        """The events of `whole`: LF-ended lines from a line's start up to a blank line, with nothing under way."""
        events: list[ServerSentEvent] = []
        for block in whole[:-2].split(b"\n\n"):
            event = _simple(block, block + b"\n\n")
            if event is not None:
                events.append(event)
                continue
            for line in block.split(b"\n"):
                self.line(line, events)
            self.line(b"", events)
        return events

    def lines(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that `chunk`'s lines complete (LF endings only, the byte order mark dealt with)."""
        end = chunk.find(b"\n")
        if end < 0:  # no line ends here: one more piece of the pending line
            self.pending = _added(self.pending, chunk)
            return []
        events: list[ServerSentEvent] = []
        first = chunk[:end]
        if self.pending:
            self.pending.append(first)
            first = b"".join(self.pending)
            self.pending = None
            self.scanned += len(first)
        self.line(first, events)
        lines = chunk[end + 1 :].split(b"\n")
        last = lines.pop()
        if last:
            self.pending = _added(self.pending, last)
        for line in lines:
            self.line(line, events)
        return events

    def line(self, line: bytes, events: list[ServerSentEvent]) -> None:
        """One whole line: a field of the event under way, or the blank line that dispatches it."""
        if not line:
            if self.data:
                data = self.data[0] if len(self.data) == 1 else b"\n".join(self.data)
                events.append(ServerSentEvent(self.event, data))
                self.data = None
            self.event = ""
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self.data = _added(self.data, value)
        elif name == b"event":
            self.event = value.decode(errors="replace")
        # a comment (empty name), `id`, `retry` or an unknown field: nothing to keep


def _added(pieces: list[bytes] | None, piece: bytes) -> list[bytes]:
    """`pieces` with `piece` added at its end, the list made for the first."""
    if pieces is None:
        return [piece]
    pieces.append(piece)
    return pieces
