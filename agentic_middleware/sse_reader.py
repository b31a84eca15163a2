"""Reading a server-sent event stream as it arrives, by the event-stream rules of the HTML standard.

The model app's answer comes as ASGI body messages cut anywhere: an event may span several messages and
one message may hold several events. Lines end in LF, CRLF or CR (a CR that ends one message may be
followed by the LF that starts the next); comment lines (starting with ':') are dropped; the `data` lines
of one event are joined with LF; an event without data is not dispatched; `id` and `retry` are not kept,
as nothing the loop does needs them.
"""

from __future__ import annotations

from typing import NamedTuple


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

    __slots__ = ("after_cr", "data", "event", "pending", "started")

    def __init__(self) -> None:
        self.pending = b""  # the start of a line not ended yet
        self.after_cr = False  # the last chunk ended in CR: an LF opening the next one ends nothing
        self.started = False
        self.event = ""
        self.data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that `chunk` completes, in order."""
        if not chunk:
            return []
        if not self.started:
            self.started = True
            chunk = chunk.removeprefix(b"\xef\xbb\xbf")  # a byte order mark may open the stream
        if self.after_cr:
            self.after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self.after_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = (self.pending + chunk if self.pending else chunk).split(b"\n")
        self.pending = lines.pop()
        events: list[ServerSentEvent] = []
        for line in lines:
            if not line:
                if self.data:
                    data = self.data[0] if len(self.data) == 1 else b"\n".join(self.data)
                    events.append(ServerSentEvent(self.event, data))
                    self.data = []
                self.event = ""
                continue
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self.data.append(value)
            elif name == b"event":
                self.event = value.decode(errors="replace")
            # a comment (empty name), `id`, `retry` or an unknown field: nothing to keep
        return events
