"""Request bodies for reruns, without serializing again the history the model app was already sent.

Between rounds a conversation only grows: the next body is the previous one with a few messages added. The
encoder writes `messages` last and keeps the bytes of the messages it wrote; when the next body starts with the
very same message objects, and none of them was written to since, only the new ones are serialized. The rest of
the body is written anew each time.

To know about writes, the client's messages become watched containers (`dict` and `list` subclasses, so hooks read
and change them as before) when the loop takes the request, before any hook sees it (`watch`); their children are
wrapped the same way when first read (a shallow copy each, so only what hooks touch costs anything). Every object a
hook can reach in that history is therefore watched, one it kept from an earlier round too: any write into them, at
any depth, marks the history as changed, and the next body is then written whole, so an in-place edit of history
already sent (a compression hook stubbing an old tool result, a redaction through a block kept since round 1)
reaches the app.

Only what the encoder wrapped itself is reused. A container from elsewhere (a hook's own message or list, an SDK's
object, a part of the app's answer) may be edited through a reference the encoder never sees, so it is written anew
at every rerun: a message that is not the encoder's ends the reused part of the history, and one written into a
watched container makes the whole history written anew for the rest of the request (`Stamp.foreign`).
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import Any

import orjson

from .payload import dumps, jsonable
from .watched import WATCHED, Stamp


@functools.cache
def _opening(field: str) -> bytes:
    """What begins the messages in a body: one for all encoders of a field, as an encoder lasts as long as its
    request."""
    return f',"{field}":['.encode()


class BodyEncoder:
    """Serializes one client request's successive rerun bodies.

    The leading messages that are the encoder's own (watched with its stamp: `watch`) are reused as bytes while
    they are the same objects and unwritten; the messages after them, and every other field, are serialized each
    time, so they may be changed any way.

    It lasts as long as its request, a live stream's too: slots, and the last body kept as its bytes and where its
    reusable messages begin and end, a view of them made only when they are reused (a view and its buffer are some
    250 bytes).
    """

    __slots__ = ("body", "end", "field", "sent", "stamp", "start")

    def __init__(self, field: str, stamp: Stamp) -> None:
        self.field = field  # the body field that holds the conversation
        self.stamp = stamp  # the one the loop watched the client's history with (`watch`)
        self.sent: tuple[Any, ...] = ()  # the leading messages written, the encoder's own, as they stood then
        self.body = b""  # the last body written, whose bytes from `start` to `end` are those messages
        self.start = self.end = 0

    def items(self) -> memoryview:
        """The bytes of the messages already sent, comma-separated, inside the last body written."""
        return memoryview(self.body)[self.start : self.end]

    def encode(self, body: dict[str, Any]) -> bytes:
        """The bytes of `body`, with its messages last."""
        messages = body.get(self.field)
        if not isinstance(messages, list):
            self.sent, self.body, self.start, self.end = (), b"", 0, 0
            return dumps(body)
        if type(body) is dict:  # most bodies: copied in C, the messages taken out
            fields = dict(body)
            del fields[self.field]
        else:
            fields = {key: value for key, value in body.items() if key != self.field}
        head = dumps(fields)
        sent, stamp = self.sent, self.stamp
        reuse = (
            bool(sent)
            and not stamp.written
            and len(messages) >= len(sent)
            # The very same objects, not equal ones: a copy equal to what was sent is not watched (a later edit of it
            # would be lost), and Python's equality is not JSON's (`True == 1`, `1.0 == 1`).
            and all(map(operator.is_, sent, messages))
        )
        kept = len(sent) if reuse else 0
        own = self.owned(messages, kept)
        opening = _opening(self.field)
        if head == b"{}":
            opening = opening[1:]
        parts: list[bytes | memoryview] = [memoryview(head)[:-1], opening]
        if reuse:
            parts.append(self.items())
        if own > kept:  # the encoder's own messages not sent yet: orjson writes them, we drop the brackets
            written = memoryview(orjson.dumps(messages[kept:own]))[1:-1]
            parts += (b",", written) if reuse else (written,)
        self.start = len(head) - 1 + len(opening)
        self.end = self.start + sum(map(len, parts[2:]))
        if own < len(messages):  # the others, written anew each time: what is not the encoder's it cannot watch
            rest = memoryview(orjson.dumps(messages[own:], default=jsonable))[1:-1]
            parts += (b",", rest) if own else (rest,)
        parts.append(b"]}")
        raw = b"".join(parts)
        stamp.written = False
        self.sent, self.body = tuple(messages[:own]), raw
        return raw

    def owned(self, messages: list[Any], start: int) -> int:
        """How many leading messages are the encoder's own (watched with its stamp), counted on from `start` (those
        already known)."""
        stamp = self.stamp
        if stamp.foreign:
            return 0
        count = start
        for message in itertools.islice(messages, start, None):
            # The slot read as an attribute: faster than `object.__getattribute__`, and a `WatchedObject` finds it
            # before its `JSONObject.__getattr__` would look among its items.
            if type(message) not in WATCHED or message._stamp is not stamp:
                break
            count += 1
        return count
