"""JSON bodies: parsing into objects that hooks can read like SDK responses, and serializing back."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import orjson

from .errors import HookError, RequestRefused

UNREAD = "_raw"
"""The one key of a streamed call's input that did not join into JSON (`{"_raw": text}`), as LiteLLM's own streaming
agentic loop holds it: hooks that read `input.get(...)` keep working, and a server tool is not run on it."""


def unread_input(value: Any) -> str | None:
    """The text of a call's input that was not JSON (`{"_raw": text}`); None for any other input."""
    text = value.get(UNREAD) if isinstance(value, dict) and len(value) == 1 else None
    return text if isinstance(text, str) else None


class JSONObject(dict[str, Any]):
    """A JSON object that also answers attribute access, as the SDKs' typed objects do.

    It is a real `dict`, so `isinstance(b, dict)` and `b.get(...)` keep working;
    an absent field read as an attribute is None, like an unset SDK field. Nested
    objects become `JSONObject`s when first read (by attribute, item or `get`), so
    a response is not walked whole when hooks read only a few of its fields.
    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) in _PLAIN:
            value = wrap(value)
            dict.__setitem__(self, key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:  # `__getitem__` written out: hooks call it the most
        value = dict.get(self, key, _ABSENT)
        if value is _ABSENT:
            return default
        if type(value) in _PLAIN:
            value = wrap(value)
            dict.__setitem__(self, key, value)
        return value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            dict.__setitem__(self, key, default)
        return self[key]

    def copy(self) -> JSONObject:
        return JSONObject(self)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """A plain deep copy, for code written for the SDKs' pydantic objects (`hasattr(r, "model_dump")`)."""
        value: dict[str, Any] = orjson.loads(orjson.dumps(self))
        return value

    def model_dump_json(self, **_: Any) -> str:
        return orjson.dumps(self).decode()

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


_PLAIN = (dict, list)
_ABSENT = object()


def wrap(value: Any) -> Any:
    """A parsed JSON value whose objects answer attribute access: the top one now, nested ones when read.

    Lists stay real lists; the objects in them are wrapped (one level) as the list is.
    """
    kind = type(value)
    if kind is dict:
        return JSONObject(value)
    if kind is list:
        return [wrap(item) if type(item) in _PLAIN else item for item in value]
    return value


def parse_object(raw: bytes) -> JSONObject | None:
    """A response body as a `JSONObject`, or None when it is not a JSON object."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return wrap(value) if type(value) is dict else None


MAX_DEPTH = 254
"""How deep a request body may nest (objects and arrays) for the hooks to take part: orjson reads 1024 levels but
writes 254, and a body the hooks see is written again (to the app, to a guardrail's copy, as a tool's bytes)."""

_ALL_BUT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but the four, deleted by `translate`
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # an opening bracket +1, a closing one -1 (signed bytes)


def too_deep(raw: bytes) -> bool:
    """Whether the JSON `raw` (one orjson read) nests deeper than `MAX_DEPTH`.

    Asked only once writing a body the client's request became has failed (a depth or recursion error), to tell the
    client's fault (a 400) from a hook's (its 500): a body that writes needs no check, so none is made up front. The
    scan is exact for valid JSON: escaped backslashes and quotes dropped, strings (every other piece between quotes)
    left out, then only brackets kept and their running sum taken, all in C; it costs several `orjson.dumps` of the
    body (measured, 44 KB: 160 us against 28), which is why it is not the common case's check."""
    plain = raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2]
    steps = b"".join(plain).translate(_STEPS, _ALL_BUT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0) > MAX_DEPTH


TOO_DEEP = f"the request body is nested more than {MAX_DEPTH} levels deep"
"""The 400 `invalid_request` a client's body too deep for the hooks gets, in the route's shape."""


def client_fault(error: Exception, unwritten: bytes | None) -> Exception:
    """`error`, or the 400 it is when a write failed on the client's own depth: `unwritten` is the client's bytes
    while no write of the body they became has yet succeeded (None after one has), the hook blamed otherwise."""
    if unwritten is not None and isinstance(error, (HookError, TypeError, RecursionError)) and too_deep(unwritten):
        return RequestRefused(TOO_DEEP)
    return error


def own_size(raw: bytes) -> bytes:
    """`raw` in an allocation of its own size, for bytes kept while a stream lasts: orjson's output keeps the whole
    buffer it was written into, at least 4 KB however short the JSON (measured: 4 KB of resident memory for each
    kept `orjson.dumps` of a 150-byte object, 9 KB for a 5 KB one; benchmarks case 12, docs/performance.md)."""
    return bytes(memoryview(raw))


def dumps(value: Any) -> bytes:
    """Serialize a body; pydantic models (LiteLLM's response types) are dumped as JSON too."""
    return orjson.dumps(value, default=jsonable)


def jsonable(value: Any) -> Any:
    """What `dumps` writes of an object orjson cannot write itself: an SDK's pydantic object, a `Mapping`."""
    if hasattr(value, "to_dict") and hasattr(value, "model_dump"):
        # The official SDKs' objects: as the API sent them (fields it left out stay out, no `"citations": null`).
        return value.to_dict(mode="json")
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
