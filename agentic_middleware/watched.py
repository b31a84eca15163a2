"""The history a request's reruns reuse the bytes of, watched for writes (encode.py tells why).

The client's messages become watched containers (`dict` and `list` subclasses, so hooks read and change them as
before) when the loop takes the request, before any hook sees it (`watch`); their children are wrapped the same way
when first read (a shallow copy each, so only what hooks touch costs anything), and handed out only wrapped. Every
object a hook can reach in that history is therefore watched, one it kept from an earlier round too. A write into
any of them marks the request's `Stamp`; one that puts in something the encoder did not wrap (a hook's own list, an
SDK's object) marks it `foreign` for good, since that object may change later through a reference nothing watches.
"""

from __future__ import annotations

from typing import Any, SupportsIndex

from .payload import JSONObject


class Stamp:
    """What the hooks did to the history the encoder watches, one for each request."""

    __slots__ = ("foreign", "written")

    def __init__(self) -> None:
        self.written = False  # written to since the last body: that body's bytes are not the history's any more
        # Something not the encoder's was written into it (a hook's own list, an SDK object): it may change through a
        # reference the encoder does not watch, so nothing is reused again, and nothing is wrapped (a plain child may
        # now be the hook's own object, and a copy of it would no longer be what the hook edits).
        self.foreign = False


# Values a write may put in watched history without ending its reuse: they cannot be changed in place.
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _mark(container: Any) -> Stamp:
    stamp: Stamp = object.__getattribute__(container, "_stamp")
    stamp.written = True
    return stamp


def _written(container: Any, value: Any) -> None:
    """`value` is written into `container`: the history has changed, and unless `value` is a scalar or the encoder's
    own, it now holds something the encoder cannot watch."""
    stamp = _mark(container)
    kind = type(value)
    if kind not in _SCALARS and not (kind in WATCHED and object.__getattribute__(value, "_stamp") is stamp):
        stamp.foreign = True


def _all_written(container: Any, values: Any) -> list[Any]:
    """`_written` for each of `values`, taken into a list (an iterator is read once)."""
    taken = list(values)
    _mark(container)
    for value in taken:
        _written(container, value)
    return taken


def _wrapped(value: Any, stamp: Stamp) -> Any:
    """A JSON object or array as a watched one with `stamp`: a shallow copy of an object, its children wrapped when
    read; an array with its items wrapped at once, as code in C reads a list's items without its methods (pydantic
    validating a `list[Any]` field keeps them as they are), and lists in it the same way."""
    kind = type(value)
    if kind is dict:  # first, as most of a history is: objects as the client sent them
        container: Any = WatchedDict(value)
    elif kind in WATCHED and object.__getattribute__(value, "_stamp") is stamp:
        return value
    elif kind is list or isinstance(value, list):
        return _watched_list(value, stamp)
    elif kind is WatchedDict:
        container = WatchedDict(value)
    elif isinstance(value, JSONObject):
        container = WatchedObject(value)
        object.__setattr__(container, "_stamp", stamp)  # a `JSONObject`'s attributes are its items
        return container
    else:
        return value
    container._stamp = stamp
    return container


def _watched_list(value: list[Any], stamp: Stamp) -> WatchedList:
    """`value` as a watched list whose items are wrapped, lists in lists too (without recursion: a client's lists
    may nest as deep as orjson reads)."""
    top = WatchedList(value)
    top._stamp = stamp
    pending = [top]
    while pending:
        current = pending.pop()
        for index, item in enumerate(list.__iter__(current)):
            if not _is_open(item, stamp):
                continue
            if isinstance(item, list):
                item = WatchedList(item)
                item._stamp = stamp
                pending.append(item)
            else:
                item = _wrapped(item, stamp)
            list.__setitem__(current, index, item)
    return top


def watch(body: dict[str, Any], field: str, stamp: Stamp) -> None:
    """Make the history in `body[field]` watched with `stamp`, in place, before any hook sees it: its messages
    become watched (a call each would cost a long history more than its parse), their children when first read.

    The body is the request as the loop took it (parsed, or resumed from a stored turn): nothing else holds its
    objects, so the copies lose no one's reference."""
    items = body.get(field)
    if type(items) is not list:
        return
    watched = []
    for item in items:
        if type(item) is dict:
            container: Any = WatchedDict(item)
            container._stamp = stamp
            watched.append(container)
        else:
            watched.append(_wrapped(item, stamp))
    body[field] = watched


def _is_open(value: Any, stamp: Stamp) -> bool:
    """Whether a child still has to be wrapped before anyone may take it."""
    if stamp.foreign:
        return False
    kind = type(value)
    if kind in WATCHED:
        return object.__getattribute__(value, "_stamp") is not stamp
    return kind is dict or kind is list or kind is JSONObject


class _DictWrites(dict[str, Any]):
    """A watched mapping: its writes mark the stamp, and its children are wrapped before they are handed out
    (by item, `get`, `items`, `values`, `pop`, a copy or a merge such as `{**message}` or `message | {}`), so that
    what a hook holds of it is watched too."""

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

    def __or__(self, other: Any) -> Any:  # a plain dict, as `dict |` gives, sharing the watched children
        self._all_children()
        return dict.__or__(self, other)

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        self._all_children()
        return dict.__or__(other, self)

    # Copies and pickles are plain (`dict`, or `JSONObject` for response parts), not watched: without this, copy
    # and pickle would rebuild the object through `__setitem__` before it has a stamp.
    _plain: Any = dict

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (self._plain, (dict(dict.items(self)),))

    def __copy__(self) -> Any:
        self._all_children()  # a shallow copy shares children with the history: writes through them must be seen
        return self._plain(dict.items(self))

    def __setitem__(self, key: Any, value: Any) -> None:
        _written(self, value)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        _mark(self)
        dict.__delitem__(self, key)

    def clear(self) -> None:
        _mark(self)
        dict.clear(self)

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self:  # nothing changes: a default is the caller's own, handed back as it is
            return dict.pop(self, key, *default)
        _mark(self)
        value = dict.pop(self, key)
        stamp = object.__getattribute__(self, "_stamp")
        return _wrapped(value, stamp) if _is_open(value, stamp) else value  # watched, should it be put back

    def popitem(self) -> Any:
        _mark(self)
        key, value = dict.popitem(self)
        stamp = object.__getattribute__(self, "_stamp")
        return key, _wrapped(value, stamp) if _is_open(value, stamp) else value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            _written(self, default)
            dict.__setitem__(self, key, default)
        return self[key]

    def update(self, *arguments: Any, **items: Any) -> None:
        taken = dict(*arguments, **items)
        _all_written(self, taken.values())
        dict.update(self, taken)

    def __ior__(self, other: Any) -> Any:
        self.update(other)
        return self


class WatchedDict(_DictWrites):
    """A sent JSON object (a plain dict before)."""

    __slots__ = ("_stamp",)


class WatchedObject(_DictWrites, JSONObject):
    """A sent JSON object that answers attribute access (a `JSONObject` before, as response parts are)."""

    __slots__ = ("_stamp",)
    _plain = JSONObject


class WatchedList(list[Any]):
    """A sent JSON array: its writes mark the stamp. Its items were wrapped when it was made (`_watched_list`), so
    whatever reads them, by index, slice, iteration, a copy, `+` or `*` (which give plain lists), gets watched ones,
    and list's own methods read them."""

    __slots__ = ("_stamp",)
    _stamp: Stamp

    def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles are plain lists (see `_DictWrites`)
        return (list, (list(list.__iter__(self)),))

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            value = _all_written(self, value)
        else:
            _written(self, value)
        list.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        _mark(self)
        list.__delitem__(self, index)

    def append(self, value: Any) -> None:
        _written(self, value)
        list.append(self, value)

    def extend(self, values: Any) -> None:
        list.extend(self, _all_written(self, values))

    def insert(self, index: SupportsIndex, value: Any) -> None:
        _written(self, value)
        list.insert(self, index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        value = list.pop(self, index)
        _mark(self)
        return value

    def remove(self, value: Any) -> None:
        list.remove(self, value)
        _mark(self)

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
        self.extend(values)
        return self

    def __imul__(self, times: Any) -> Any:  # type: ignore[misc]
        _mark(self)
        return list.__imul__(self, times)


WATCHED = (WatchedDict, WatchedObject, WatchedList)

# Named as what they stand for: messages that name a value's type (`type(value).__name__`: "a type that is list",
# "is not JSON serializable") speak of the client's JSON, not of the watching. `__qualname__` keeps the real name.
WatchedDict.__name__ = "dict"
WatchedObject.__name__ = "JSONObject"
WatchedList.__name__ = "list"
