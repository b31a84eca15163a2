"""Every string of a value a guardrail must judge, each with its slot: the walk that makes guardrails fail closed.

A request's history can hold blocks and items of any type: the records of a provider's server tools (code
execution, web fetch, MCP, file search, shells), types newer than this package, or types a client made up. The
model app may read any of them (a lenient one turns what it does not know into text), so a guardrail is given
every string in them, not only the fields a reader names: a block or item whose type no reader knows is walked
whole, every key and every string at any depth but its own ids (`unknown_slots`), and a known record with a fixed
schema has every string value given but its ids (`strings`). A walk past `MAX_DEPTH` levels is refused rather
than cut short.

Each string is given as a slot, `(container, key)`, so a guardrail's edit is written back where the string came
from; a key's slot (`KeyOf`) renames the key in place, keeping the object's order, each object rebuilt once
for all its renamed keys (`rename_keys`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import RequestRefused

Slot = tuple[Any, Any]  # (container, key): where one text stands

# How deep a walk goes before it refuses: far past any real record, well within Python's recursion limit.
MAX_DEPTH = 64

# Fields of a known record whose values are not words: ids, the type, a role or status (fixed words of the API),
# a provider's signature and cache settings, a caller's ids. The model app reads none of them as text.
HARMLESS = frozenset(
    (
        "type",
        "id",
        "call_id",
        "tool_use_id",
        "tool_call_id",
        "item_id",
        "approval_request_id",
        "file_id",
        "container_id",
        "role",
        "status",
        "signature",
        "cache_control",
        "caller",
    )
)

# Fields of a known record that hold JSON the client shapes freely (a tool call's input, a file's attributes, a
# shell's environment, a listed tool's schema): their keys are words too, and none of their values is harmless.
FREE_FORM = frozenset(("input", "arguments", "attributes", "env", "input_schema", "parameters"))


def unreadable(what: str) -> RequestRefused:
    return RequestRefused(f"the request holds {what}: the guardrails cannot read it")


def check_depth(value: Any) -> None:
    """Refuses a value nested deeper than `MAX_DEPTH` levels below its messages, found without recursion: read
    before anything walks or copies it, a request nested a few hundred levels would exhaust Python's stack in a
    reader, a copy or the guardrail itself (a 500 blamed on the guardrail) rather than be refused."""
    limit = MAX_DEPTH + 2  # the messages' list and a message are the levels above a message's content
    stack = [(value, 0)]
    while stack:
        inner, depth = stack.pop()
        if depth > limit:
            raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
        if isinstance(inner, dict):
            stack.extend((item, depth + 1) for item in inner.values() if isinstance(item, dict | list))
        elif isinstance(inner, list):
            stack.extend((item, depth + 1) for item in inner if isinstance(item, dict | list))


def string_slot(holder: dict[str, Any], key: str) -> Iterator[Slot]:
    """A field that must be a string when present: its slot, or a refusal when it is anything else."""
    value = holder.get(key)
    if isinstance(value, str):
        yield holder, key
    elif value is not None:
        raise unreadable(f"a {key} that is {type(value).__name__}")


class KeyOf:
    """An object's keys as the slots of texts: each read as the key's name, written back as a rename of it.

    The renames are only collected here; `rename_keys` rebuilds each object once, after every text is written
    (values are written under the old names first). Rebuilding the object at each rename, to keep its order, cost
    a pass over the whole object per renamed key: an object of 16,000 keys took a minute to mask, the worker's
    event loop held the whole time. One `KeyOf` serves all the keys of one object."""

    __slots__ = ("holder", "renames")

    def __init__(self, holder: dict[str, Any]) -> None:
        self.holder = holder
        self.renames: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        return key

    def __setitem__(self, key: str, text: str) -> None:
        if text != key:
            self.renames[key] = text


def rename_keys(objects: Iterable[KeyOf]) -> None:
    """Applies the renames collected on `objects`, each object rebuilt once in its own order (its identity kept, so
    the objects around it still hold it). A rename onto a name the object keeps, or two keys renamed to one name,
    would lose a value: refused before any object is changed."""
    rebuilt = []
    for keys in objects:
        if not keys.renames:
            continue
        entries = [(keys.renames.get(name, name), value) for name, value in keys.holder.items()]
        seen: set[str] = set()
        for name, _ in entries:
            if name in seen:
                raise RequestRefused(f"a guardrail's edit would merge two keys of an object (onto {name!r})")
            seen.add(name)
        rebuilt.append((keys, entries))
    for keys, entries in rebuilt:
        keys.holder.clear()
        keys.holder.update(entries)
        keys.renames.clear()


def strings(value: Any, skipped: frozenset[str] = frozenset(), depth: int = 0, own: bool = True) -> Iterator[Slot]:
    """Every string value in a known record (its ids and the `skipped` fields left out), its free-form JSON fields
    given whole, keys and all.

    Ids, types, roles and the `skipped` fields are left out at the record's own level only (`own`: the record, or
    each record of a list of them): the API fixes them there. Deeper, where the API puts no such field, a
    `"status"` or a `"type"` is a string like any other, and given."""
    if depth > MAX_DEPTH:
        raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        for index, inner in enumerate(value):
            if isinstance(inner, str):
                yield value, index
            else:
                yield from strings(inner, skipped, depth + 1, own)
        return
    if not isinstance(value, dict):
        return
    for key, inner in list(value.items()):
        if own and (key in HARMLESS or key in skipped):
            continue
        if isinstance(inner, str):
            yield value, key
        elif key in FREE_FORM:
            yield from every_string(inner, depth + 1)
        else:
            yield from strings(inner, skipped, depth + 1, False)


def read_fields(*names: str) -> frozenset[str]:
    """The fields of a known block, part, message or item its reader reads or leaves out on purpose, for
    `rest_slots`: `names`, and the ids and fixed words (HARMLESS) left out everywhere."""
    return HARMLESS.union(names)


def rest_slots(holder: dict[str, Any], read: frozenset[str]) -> Iterator[Slot]:
    """The strings of a known block's, part's, message's or item's fields that its reader does not name: a field
    the API adds later, or one a client makes up, which a lenient app may show the model. `read` (`read_fields`)
    names the fields read elsewhere or left out on purpose (ids, fixed words, bytes, images, encrypted or signed
    content). Walked as a known record is (`strings`): values, not the field names, which are the API's.

    An ordinary message or part has no such field: where there are many (messages, text parts, tool results and
    calls) the caller looks first (`read.issuperset(holder)`, in C) and starts no walk, which would cost the
    guardrail view of a long history a tenth more."""
    for key, inner in holder.items():
        if key in read:
            continue
        if isinstance(inner, str):
            yield holder, key
        elif isinstance(inner, dict | list):
            yield from strings(inner, depth=1, own=False)


def is_image(text: str) -> bool:
    """Whether a string is an image and not words: an image data URL, or base64 whose bytes open as an image does
    (PNG, JPEG, GIF, WebP). A field the API fills with an image may hold anything a client writes there."""
    if text.startswith("data:image/"):
        return True
    try:
        head = base64.b64decode(text[:16], validate=True)
    except (ValueError, binascii.Error):
        return False
    return head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8")) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def image_slots(holder: dict[str, Any], key: str) -> Iterator[Slot]:
    """A field the API fills with an image (a base64 string, or an object holding one): its strings that are not
    images (`is_image`) are given, so that words written where an image belongs are judged."""
    value = holder.get(key)
    if isinstance(value, str):
        if not is_image(value):
            yield holder, key
        return
    for slot in strings(value, depth=1):
        if not is_image(slot[0][slot[1]]):
            yield slot


def every_string(value: Any, depth: int = 0) -> Iterator[Slot]:
    """Every key and every string in a JSON value, at any depth: a key's slot after its value's slots, so that a
    value is written back before its key is renamed."""
    if depth > MAX_DEPTH:
        raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    keys = KeyOf(value) if isinstance(value, dict) else None
    for key, inner in list(items):
        if isinstance(inner, str):
            yield value, key
        else:
            yield from every_string(inner, depth + 1)
        if keys is not None:
            yield keys, key


def unknown_slots(block: dict[str, Any]) -> Iterator[Slot]:
    """A block, part or item of a type no reader knows: every key and string in it, its type too (an app that shows
    what it does not know may show that), but its own ids."""
    keys = KeyOf(block)
    for key, inner in list(block.items()):
        if key in HARMLESS and key != "type":
            continue
        if isinstance(inner, str):
            yield block, key
        else:
            yield from every_string(inner, 1)
        yield keys, key
