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

from typing import NamedTuple

_BOM = b"\xef\xbb\xbf"


class ServerSentEvent(NamedTuple):
    """One dispatched event: its type (`""` when it had no `event` field) and its data, as bytes."""

    event: str
    data: bytes

    def encode(self) -> bytes:
        """The event written back as the stream's bytes."""
        data = b"data: " + self.data.replace(b"\n", b"\ndata: ") + b"\n\n"
        return b"event: " + self.event.encode() + b"\n" + data if self.event else data


class SSEReader:
    """Turns the chunks of one event stream into whole events; feed it every chunk in order."""

    __slots__ = ("after_cr", "data", "event", "head", "pending", "scanned")

    def __init__(self) -> None:
        self.head: bytes | None = b""  # the stream's first bytes, until a byte order mark is ruled out; then None
        self.pending: list[bytes] = []  # the pieces of a line not ended yet
        self.after_cr = False  # the last chunk ended in CR: an LF opening the next one ends nothing
        self.event = ""
        self.data: list[bytes] = []
        self.scanned = 0
        """Bytes read from chunks plus bytes copied to join a line's pieces: the reader's work, about one pass."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that `chunk` completes, in order."""
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
        end = chunk.find(b"\n")
        if end < 0:  # no line ends here: one more piece of the pending line
            self.pending.append(chunk)
            return []
        events: list[ServerSentEvent] = []
        first = chunk[:end]
        if self.pending:
            self.pending.append(first)
            first = b"".join(self.pending)
            self.pending = []
            self.scanned += len(first)
        self.line(first, events)
        lines = chunk[end + 1 :].split(b"\n")
        last = lines.pop()
        if last:
            self.pending.append(last)
        for line in lines:
            self.line(line, events)
        return events

    def line(self, line: bytes, events: list[ServerSentEvent]) -> None:
        """One whole line: a field of the event under way, or the blank line that dispatches it."""
        if not line:
            if self.data:
                data = self.data[0] if len(self.data) == 1 else b"\n".join(self.data)
                events.append(ServerSentEvent(self.event, data))
                self.data = []
            self.event = ""
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self.data.append(value)
        elif name == b"event":
            self.event = value.decode(errors="replace")
        # a comment (empty name), `id`, `retry` or an unknown field: nothing to keep
