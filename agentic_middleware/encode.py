"""Request bodies for reruns, without serializing again the history the model app was already sent.

Between rounds a conversation only grows: the next body is the previous one with a few messages added. The
encoder keeps the bytes it sent last, with `messages` written last, and when the next body has the same other
fields and starts with the very same message objects, it writes only the new messages after the old bytes.
"""

from __future__ import annotations

from typing import Any

from .payload import dumps

_SPACE = b" \t\r\n"


def _closing_bracket(raw: bytes) -> int:
    """Where the `]` of a body ending in `]}` (JSON space allowed) stands, else -1."""
    end = len(raw) - 1
    for expected in (ord("}"), ord("]")):
        while end >= 0 and raw[end] in _SPACE:
            end -= 1
        if end < 0 or raw[end] != expected:
            return -1
        end -= 1
    return end + 1


class BodyEncoder:
    """Serializes one client request's successive bodies.

    Message objects already sent are taken as unchanged: a hook that changes an earlier message must put a new
    object in its place (as `messages + [...]` or a list comprehension does), not edit the old one in place.
    """

    def __init__(self) -> None:
        self.raw = b""
        self.bracket = -1  # where the sent messages' closing `]` stands in `raw`; -1: nothing to build on
        self.sent: list[Any] = []
        self.rest: dict[str, Any] = {}

    def remember(self, body: dict[str, Any], raw: bytes) -> None:
        """Build on `raw`, the bytes `body` was sent as, when `messages` is its last field."""
        messages = body.get("messages")
        last = isinstance(messages, list) and next(reversed(body)) == "messages"
        self.keep(raw, _closing_bracket(raw) if last else -1, messages, body)

    def keep(self, raw: bytes, bracket: int, messages: Any, body: dict[str, Any]) -> None:
        self.raw, self.bracket = raw, bracket
        self.sent = list(messages) if bracket >= 0 else []
        self.rest = {key: value for key, value in body.items() if key != "messages"} if bracket >= 0 else {}

    def encode(self, body: dict[str, Any]) -> bytes:
        """The bytes of `body`, with its messages last."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            raw = dumps(body)
            self.keep(raw, -1, None, body)
            return raw
        rest = {key: value for key, value in body.items() if key != "messages"}
        sent = self.sent
        if (
            self.bracket >= 0
            and len(messages) >= len(sent)
            and messages[: len(sent)] == sent  # the same objects: list equality checks identity first
            and rest == self.rest
        ):
            tail = messages[len(sent) :]
            if not tail:
                return self.raw
            new = b",".join(dumps(message) for message in tail)
            raw = b"".join((memoryview(self.raw)[: self.bracket], b"," if sent else b"", new, b"]}"))
        else:
            raw = dumps({**rest, "messages": messages})
        self.keep(raw, len(raw) - 2, messages, rest)
        return raw
