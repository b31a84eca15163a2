"""What a model app's 2xx answer is when its content-type does not say: JSON, an event stream, or neither.

A forwarding route that drops the upstream's content-type (FastAPI's `StreamingResponse(r.aiter_raw())`, a bare
`Response(body)`) or labels it `text/plain` or `application/octet-stream` still sends the route's JSON or its
events; passing such an answer on unread would let a server tool's call reach the client. So the first bytes of
the body decide: a JSON object opens with `{` (after white space), an event stream with a field or a comment. Only
a few bytes are ever held to decide (`SNIFF_BYTES`): a real stream of another kind goes on at once.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable
from typing import Any

from starlette.types import Message

logger = logging.getLogger("agentic_middleware")

SNIFF_BYTES = 1024
"""The most bytes held to decide; a body still undecided then (white space alone, say) is neither."""

_BOM = b"\xef\xbb\xbf"
_UTF16_OBJECTS = (b"\xff\xfe{\x00", b"\xfe\xff\x00{")
_FIELDS = (b"data", b"event", b"id", b"retry")
_JSON_SPACE = b" \t\r\n"

JSON, EVENTS, OTHER = "json", "events", "other"


def sniffed(head: bytes, complete: bool) -> str | None:
    """`JSON`, `EVENTS`, `OTHER`, or None when the bytes so far do not tell yet (never once `SNIFF_BYTES` are in).
    `complete`: `head` is the whole body. The caller holds white space that opens a body however long it is, and
    passes it as one byte (a space, or a line end when it is only line ends)."""
    start = head.lstrip(_JSON_SPACE)
    if start[:1] == b"{" or start.removeprefix(_BOM).lstrip(_JSON_SPACE)[:1] == b"{":  # the SDKs' json takes a BOM
        return JSON
    if head.startswith(_UTF16_OBJECTS):  # and UTF-16 opened by its byte order mark
        return JSON
    waiting = not complete and len(head) < SNIFF_BYTES
    line = head.removeprefix(_BOM).lstrip(b"\r\n")  # blank lines may open a stream
    if line[:1] == b":":
        return EVENTS
    for name in _FIELDS:
        if line.startswith(name) and line[len(name) : len(name) + 1] in (b":", b"\r", b"\n"):
            return EVENTS
    if waiting and (any(name.startswith(line) for name in _FIELDS) or _BOM.startswith(head)):
        return None  # "dat", a part of a byte order mark, or blank lines: the next bytes tell
    return None if waiting and not start else OTHER


def is_event_stream(start: Message) -> bool:
    """A 2xx, unencoded `text/event-stream` answer without trailers."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return False
    kind, encoded = media_type(start.get("headers", ()))
    return kind == b"text/event-stream" and not encoded


def sniffable(start: Message) -> bool:
    """A 2xx answer, unencoded and without trailers, whose type is neither JSON nor an event stream (or absent)."""
    if not 200 <= start["status"] < 300 or start.get("trailers", False):
        return False
    kind, encoded = media_type(start.get("headers", ()))
    return not encoded and not is_json(kind) and kind != b"text/event-stream"


def unjudged_reason(start: Message) -> str | None:
    """Why a 2xx answer goes on without being judged, for the log; None for an error answer (it holds no call)."""
    if not 200 <= start["status"] < 300:
        return None
    kind, _ = media_type(start.get("headers", ()))
    if start.get("trailers", False):
        return "it has HTTP trailers, which the middleware does not buffer"
    named = f"of type {kind.decode(errors='replace')}" if kind else "without a content-type"
    return f"it is {named} and its body is neither a JSON object nor an event stream"


def is_json(kind: bytes) -> bool:
    return kind == b"application/json" or kind.endswith(b"+json")


def media_type(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The content type without parameters, lowercase, and whether a content-encoding applies."""
    kind = b""
    for name, value in headers:
        if name.lower() == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
    return kind, encoding_of(headers) is not None


def encoding_of(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The content-encodings that apply, lowercase, joined by commas in the order applied; None for none."""
    codings = [
        coding.strip()
        for name, value in headers
        if name.lower() == b"content-encoding"
        for coding in value.lower().split(b",")
        if coding.strip() not in (b"", b"identity")
    ]
    return b", ".join(codings) if codings else None


_warned: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
_warned_anywhere: set[tuple[str, str]] = set()  # for apps that take no weak reference


def warn_unjudged(app: Any, path: str, reason: str) -> None:
    """A WARNING, once per wrapped app, route and reason, that a 2xx answer went on without hooks."""
    try:
        seen = _warned.setdefault(app, set())
    except TypeError:
        seen = _warned_anywhere
    if (path, reason) in seen:
        return
    seen.add((path, reason))
    logger.warning("a 2xx answer of the model app on %s passed through without hooks: %s", path, reason)
