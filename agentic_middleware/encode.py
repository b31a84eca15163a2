"""Request bodies for reruns, without serializing again the history the model app was already sent.

Between rounds a conversation only grows: the next body is the previous one with a few messages added. The
encoder writes `messages` last and keeps the bytes of the messages it wrote; when the next body starts with the
very same message objects, only the new ones are serialized, and the rest of the body is written anew each time.
"""

from __future__ import annotations

from typing import Any

from .payload import dumps


class BodyEncoder:
    """Serializes one client request's successive rerun bodies.

    Message objects already sent are taken as unchanged: a hook that changes an earlier message must put a new
    object in its place (as `messages + [...]` or a list comprehension does), not edit the old one in place.
    Every other field is serialized each time, so it may be changed any way.
    """

    def __init__(self, field: str = "messages") -> None:
        self.field = field  # the body field that holds the conversation
        self.opening = f',"{field}":['.encode()
        self.sent: list[Any] = []  # the message objects already written, as they stood then
        self.items = memoryview(b"")  # their bytes, comma-separated, inside the last body written

    def encode(self, body: dict[str, Any]) -> bytes:
        """The bytes of `body`, with its messages last."""
        messages = body.get(self.field)
        if not isinstance(messages, list):
            self.sent, self.items = [], memoryview(b"")
            return dumps(body)
        head = dumps({key: value for key, value in body.items() if key != self.field})
        sent = self.sent
        parts: list[bytes | memoryview]
        if sent and len(messages) >= len(sent) and messages[: len(sent)] == sent:
            # The same objects (list equality checks identity first): write only the new ones.
            tail = messages[len(sent) :]
            parts = [self.items, b",", memoryview(dumps(tail))[1:-1]] if tail else [self.items]
        else:
            parts = [memoryview(dumps(messages))[1:-1]]  # one call: orjson writes the array, we drop its brackets
        opening = self.opening[1:] if head == b"{}" else self.opening
        raw = b"".join((memoryview(head)[:-1], opening, *parts, b"]}"))
        start = len(head) - 1 + len(opening)
        self.sent, self.items = list(messages), memoryview(raw)[start:-2]
        return raw
