"""Request bodies for reruns, without serializing again the history the model app was already sent.

Between rounds a conversation only grows: the next body is the previous one with a few messages added. The
encoder writes `messages` last and keeps the bytes of the messages it wrote; when the next body starts with the
very same message objects, and none of them was written to since, only the new ones are serialized. The rest of
the body is written anew each time.

To know about writes, the messages the encoder has sent become watched containers (`dict` and `list` subclasses,
so hooks read and change them as before), their children wrapped the same way when first read (a shallow copy each,
so only what hooks touch costs anything): any write into them, at any depth, marks the history as changed, and the
next body is then written whole, so an in-place edit of history already sent (a compression hook stubbing an old
tool result) reaches the app.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, SupportsIndex

import orjson

from .payload import JSONObject, dumps, jsonable


class Stamp:
    """Set when anything the encoder has sent is written to."""

    __slots__ = ("written",)

    def __init__(self) -> None:
        self.written = False


def _mark(container: Any) -> None:
    stamp = object.__getattribute__(container, "_stamp")
    if stamp is not None:
        stamp.written = True


def _wrapped(value: Any, stamp: Stamp) -> Any:
    """A JSON object or array as a watched one with `stamp` (a shallow copy: its children are wrapped when read)."""
    kind = type(value)
    if kind is dict:  # first, as most of a history is: objects as the client sent them
        container: Any = WatchedDict(value)
    elif kind is list:
        container = WatchedList(value)
    elif kind in _WATCHED and object.__getattribute__(value, "_stamp") is stamp:
        return value
    elif kind is WatchedDict:
        container = WatchedDict(value)
    elif isinstance(value, JSONObject):
        container = WatchedObject(value)
        object.__setattr__(container, "_stamp", stamp)  # a `JSONObject`'s attributes are its items
        return container
    elif isinstance(value, list):
        container = WatchedList(value)
    else:
        return value
    container._stamp = stamp
    return container


def _watched(items: list[Any], stamp: Stamp) -> list[Any]:
    """`_wrapped` of each item: a history's messages, most of them objects as the client sent them, made watched here
    without a call each (a long history's first body spent most of its encoding in those calls)."""
    watched = []
    for item in items:
        if type(item) is dict:
            container: Any = WatchedDict(item)
            container._stamp = stamp
            watched.append(container)
        else:
            watched.append(_wrapped(item, stamp))
    return watched


def _is_open(value: Any, stamp: Stamp) -> bool:
    """Whether a child still has to be wrapped before anyone may write to it."""
    kind = type(value)
    if kind in _WATCHED:
        return object.__getattribute__(value, "_stamp") is not stamp
    return kind is dict or kind is list or kind is JSONObject


class _DictWrites(dict[str, Any]):
    """A watched mapping: its writes mark the stamp, and its children are wrapped before they are handed out
    (by item, `get`, `items`, `values`, a copy or a merge such as `{**message}`), so writes into them are seen too."""

    __slots__ = ()

    def _child(self, key: Any, value: Any) -> Any:
        stamp = object.__getattribute__(self, "_stamp")
        if _is_open(value, stamp):
            value = _wrapped(value, stamp)
            dict.__setitem__(self, key, value)
        return value

    def _all_children(self) -> None:
        for key, value in list(dict.items(self)):
            self._child(key, value)

    def __getitem__(self, key: Any) -> Any:
        return self._child(key, dict.__getitem__(self, key))

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Any:  # not dict's own: a merge then reads each value through `__getitem__`
        return dict.__iter__(self)

    def items(self) -> Any:
        self._all_children()
        return dict.items(self)

    def values(self) -> Any:
        self._all_children()
        return dict.values(self)

    def copy(self) -> Any:
        self._all_children()
        return dict.copy(self)

    # Copies and pickles are plain (`dict`, or `JSONObject` for response parts), not watched: without this, copy
    # and pickle would rebuild the object through `__setitem__` before it has a stamp.
    _plain: Any = dict

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (self._plain, (dict(dict.items(self)),))

    def __copy__(self) -> Any:
        self._all_children()  # a shallow copy shares children with the history: writes through them must be seen
        return self._plain(dict.items(self))

    def __setitem__(self, key: Any, value: Any) -> None:
        _mark(self)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        _mark(self)
        dict.__delitem__(self, key)

    def clear(self) -> None:
        _mark(self)
        dict.clear(self)

    def pop(self, *arguments: Any) -> Any:
        _mark(self)
        return dict.pop(self, *arguments)

    def popitem(self) -> Any:
        _mark(self)
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            _mark(self)
            dict.__setitem__(self, key, default)
        return self[key]

    def update(self, *arguments: Any, **items: Any) -> None:
        _mark(self)
        dict.update(self, *arguments, **items)

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]
        _mark(self)
        dict.update(self, other)
        return self


class WatchedDict(_DictWrites):
    """A sent JSON object (a plain dict before)."""

    __slots__ = ("_stamp",)


class WatchedObject(_DictWrites, JSONObject):
    """A sent JSON object that answers attribute access (a `JSONObject` before, as response parts are)."""

    __slots__ = ("_stamp",)
    _plain = JSONObject


class WatchedList(list[Any]):
    """A sent JSON array: its writes mark the stamp, its items are wrapped before they are handed out."""

    __slots__ = ("_stamp",)

    def _all_items(self) -> None:
        stamp = object.__getattribute__(self, "_stamp")
        for index, value in enumerate(list.__iter__(self)):
            if _is_open(value, stamp):
                list.__setitem__(self, index, _wrapped(value, stamp))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            self._all_items()
            return list.__getitem__(self, index)
        value = list.__getitem__(self, index)
        stamp = object.__getattribute__(self, "_stamp")
        if _is_open(value, stamp):
            value = _wrapped(value, stamp)
            list.__setitem__(self, index, value)
        return value

    def __iter__(self) -> Any:
        self._all_items()
        return list.__iter__(self)

    def __reversed__(self) -> Any:
        self._all_items()
        return list.__reversed__(self)

    def copy(self) -> Any:
        self._all_items()
        return list.copy(self)

    def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles are plain lists (see `_DictWrites`)
        return (list, (list(list.__iter__(self)),))

    def __copy__(self) -> Any:
        return self.copy()

    def __setitem__(self, index: Any, value: Any) -> None:
        _mark(self)
        list.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        _mark(self)
        list.__delitem__(self, index)

    def append(self, value: Any) -> None:
        _mark(self)
        list.append(self, value)

    def extend(self, values: Any) -> None:
        _mark(self)
        list.extend(self, values)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        _mark(self)
        list.insert(self, index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        _mark(self)
        return list.pop(self, index)

    def remove(self, value: Any) -> None:
        _mark(self)
        list.remove(self, value)

    def clear(self) -> None:
        _mark(self)
        list.clear(self)

    def sort(self, *arguments: Any, **options: Any) -> None:
        _mark(self)
        list.sort(self, *arguments, **options)

    def reverse(self) -> None:
        _mark(self)
        list.reverse(self)

    def __iadd__(self, values: Any) -> Any:  # type: ignore[misc]
        _mark(self)
        list.extend(self, values)
        return self

    def __imul__(self, times: Any) -> Any:  # type: ignore[misc]
        _mark(self)
        return list.__imul__(self, times)


_WATCHED = (WatchedDict, WatchedObject, WatchedList)


@functools.cache
def _opening(field: str) -> bytes:
    """What begins the messages in a body: one for all encoders of a field, as an encoder lasts as long as its
    request."""
    return f',"{field}":['.encode()


class BodyEncoder:
    """Serializes one client request's successive rerun bodies.

    Message objects already sent are reused as bytes while they are the same objects and unwritten; every other
    field is serialized each time, so it may be changed any way.

    It lasts as long as its request, a live stream's too: slots, and the last body kept as its bytes and where its
    messages begin, a view of them made only when they are reused (a view and its buffer are some 250 bytes).
    """

    __slots__ = ("body", "field", "opaque", "sent", "stamp", "start")

    def __init__(self, field: str = "messages") -> None:
        self.field = field  # the body field that holds the conversation
        self.sent: tuple[Any, ...] = ()  # the message objects already written, as they stood then
        self.body = b""  # the last body written, whose bytes from `start` to its last two are those messages
        self.start = 0
        self.stamp = Stamp()
        self.opaque = False  # whether the messages last written held an object the encoder cannot watch

    def items(self) -> memoryview:
        """The bytes of the messages already sent, comma-separated, inside the last body written."""
        return memoryview(self.body)[self.start : -2]

    def encode(self, body: dict[str, Any]) -> bytes:
        """The bytes of `body`, with its messages last; its messages become watched."""
        messages = body.get(self.field)
        if not isinstance(messages, list):
            self.sent, self.body, self.start = (), b"", 0
            return dumps(body)
        if type(body) is dict:  # most bodies: copied in C, the messages taken out
            fields = dict(body)
            del fields[self.field]
        else:
            fields = {key: value for key, value in body.items() if key != self.field}
        head = dumps(fields)
        sent = self.sent
        parts: list[bytes | memoryview]
        reuse = (
            bool(sent)
            and not self.stamp.written
            and len(messages) >= len(sent)
            # The very same objects, not equal ones: a copy equal to what was sent is not watched (a later edit of it
            # would be lost), and Python's equality is not JSON's (`True == 1`, `1.0 == 1`).
            and all(map(operator.is_, sent, messages))
        )
        self.opaque = False
        if reuse:
            tail = messages[len(sent) :]
            parts = [self.items(), b",", memoryview(self.messages_json(tail))[1:-1]] if tail else [self.items()]
        else:
            # One call: orjson writes the array, we drop its brackets.
            parts = [memoryview(self.messages_json(messages))[1:-1]]
        opening = _opening(self.field)
        if head == b"{}":
            opening = opening[1:]
        raw = b"".join((memoryview(head)[:-1], opening, *parts, b"]}"))
        start = len(head) - 1 + len(opening)
        self.stamp.written = False
        unwatched = slice(len(sent) if reuse else 0, None)  # written in place: `list`'s own, not the watched list's
        list.__setitem__(messages, unwatched, _watched(list.__getitem__(messages, unwatched), self.stamp))
        # Messages holding an object the encoder cannot watch are written whole next time (see `unwatchable`).
        self.sent, self.body, self.start = () if self.opaque else tuple(messages), raw, start
        return raw

    def messages_json(self, messages: list[Any]) -> bytes:
        """The messages' JSON, noting whether any holds an object orjson could not write itself (`unwatchable`)."""
        return orjson.dumps(messages, default=self.unwatchable)

    def unwatchable(self, value: Any) -> Any:
        """orjson's `default`: `value` (an SDK's pydantic object, a `Mapping` that is not a `dict`) is no container
        the encoder can watch, so an edit of it in place in a later round would go unseen: the history it is in is
        not reused (`test_an_sdk_object_in_the_history_edited_in_place_a_round_later_is_sent_as_edited`)."""
        self.opaque = True
        return jsonable(value)
