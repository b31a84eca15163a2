"""Every string of a value a guardrail must judge, each with its slot: the walk that makes guardrails fail closed.

A request's history can hold blocks and items of any type: the records of a provider's server tools (code
execution, web fetch, MCP, file search, shells), types newer than this package, or types a client made up. The
model app may read any of them (a lenient one turns what it does not know into text), so a guardrail is given
every string in them, not only the fields a reader names: a block or item whose type no reader knows is walked
whole, every key and every string at any depth but its own ids (`unknown_slots`), and a known record with a fixed
schema has every string value given but its ids (`strings`); the fields of a known block, part, message or item
that its reader does not name are given keys and all, but the APIs' own names (`rest_slots`). A walk past
`MAX_DEPTH` levels is refused rather than cut short.

Each string is given as a slot, `(container, key)`, so a guardrail's edit is written back where the string came
from; a key's slot (`KeyOf`) renames the key in place, keeping the object's order, each object rebuilt once
for all its renamed keys (`rename_keys`); a guardrail's edit of a tool call's arguments that would make two keys
one is refused as a rename onto a kept key is (`refuse_merged_keys`).

The fields taken for ids and fixed words (`HARMLESS`, and an encrypted content) are left out only while they hold
what the API puts there (`fixed`): an id, a type or a signature that is one token, a role or status of the APIs'
words, cache settings and a caller of the API's shape. Anything else in them (free text, an object a client
made up) is given as a field no reader names is.
"""

from __future__ import annotations

import base64
import json
import re
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

# The roles of the APIs' messages, and the statuses of the Responses items (read from the openai SDK's types; no
# Messages block has one): the fixed words a `role` or `status` holds. Any other word there is given (`fixed`).
ROLES = frozenset(("user", "assistant", "system", "developer", "tool", "function"))
STATUSES = frozenset(
    ("in_progress", "completed", "incomplete", "failed", "searching", "interpreting", "generating", "calling")
)
# What an id, a type, a signature or an encrypted content of the APIs is made of: one token of ASCII letters,
# digits and `_-.:+/=`. Anthropic's ids match `^[a-zA-Z0-9_-]+$` (its API's own pattern); OpenAI's are `call_…`,
# `fc_…`, `msg_…`, `rs_…`, `file-…`; LiteLLM's Gemini tool call ids carry a base64 thought signature after
# `__thought__`, and some providers' ids are `functions.name:0`; signatures and encrypted contents are base64
# (standard or URL-safe) or, ours, `amw1.` and base64. Free text (a space, other punctuation, a letter beyond
# ASCII) is not one, and is given; a single word of these characters can not be told from an id, and is not.
_TOKEN = re.compile(r"[A-Za-z0-9_.:+/=-]*")
# The settings objects the APIs put in `cache_control` (`{"type": "ephemeral", "ttl": "5m"}`) and a Messages
# tool call's `caller` (`{"type": "code_execution_20250825", "tool_id": "srvtoolu_…"}`): their keys, each value a
# token. An object with any other key, or a value not a token, is given, keys and all.
_SETTINGS = {"cache_control": frozenset(("type", "ttl")), "caller": frozenset(("type", "tool_id"))}
# The fields left out only while they hold what the API puts there (`fixed`), where a reader reads a known block,
# part, message or item (`plain`, `rest_slots`): its type is the reader's own word, left out whatever it holds.
CHECKED = HARMLESS.union(("encrypted_content",))
_CHECKED_REST = CHECKED.difference(("type",))


def fixed(key: str, value: Any) -> bool:
    """Whether the value of a field taken for an id or a fixed word (`CHECKED`) is what the API puts there, and so
    no words: left out. A free-text id or status, a role none of the APIs has, an object in an id, or cache
    settings with a key the API does not have, are words a client wrote where a lenient app may show them."""
    if isinstance(value, str):
        if key == "role":
            return value in ROLES
        if key == "status":
            return value in STATUSES
        return key not in _SETTINGS and _TOKEN.fullmatch(value) is not None
    if isinstance(value, dict):
        names = _SETTINGS.get(key)
        return (
            names is not None
            and names.issuperset(value)
            and all(isinstance(inner, str) and _TOKEN.fullmatch(inner) for inner in value.values())
        )
    return not isinstance(value, list)  # a number, a boolean, null: no words


# The names the APIs give the fields of their known blocks, parts, messages and items (and of the objects within
# them, a citation, a logprob) that a reader does not read: where `rest_slots` walks such a field its name is not
# given, being a word of the API's and not the client's. Any other name there is one a client made up, and given
# (a lenient app may show the model the field, name and all). A name missing here is only given needlessly.
API_FIELDS = HARMLESS.union(
    (
        # Messages: a tool result's flag, a document's citations setting, a citation's places
        "is_error",
        "citations",
        "enabled",
        "cited_text",
        "document_index",
        "document_title",
        "start_char_index",
        "end_char_index",
        "start_page_number",
        "end_page_number",
        "start_block_index",
        "end_block_index",
        "search_result_index",
        "encrypted_index",
        "page_age",
        # Chat: a message's name, refusal, annotations (URL citations), and the fields providers and LiteLLM add
        "name",
        "refusal",
        "annotations",
        "url_citation",
        "start_index",
        "end_index",
        "reasoning_content",
        "reasoning",
        "reasoning_details",
        "provider_specific_fields",
        "prefix",
        "format",
        # Responses: a text's logprobs, a file's name and URL, an assistant message's phase, an MCP server's label
        "logprobs",
        "token",
        "logprob",
        "bytes",
        "top_logprobs",
        "filename",
        "file_url",
        "file_data",
        "phase",
        "server_label",
        "output",
        "error",
        # the fields readers read, where they stand deeper
        "text",
        "content",
        "title",
        "url",
        "source",
        "data",
        "media_type",
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


def refuse_merged_keys(given: Any, sent: Any) -> None:
    """Refuses a guardrail's edit of a call's arguments (`sent`, where it was given `given`) whose JSON names a key
    twice in one object (a mask of `{"pineapple": 1, "masked": 2}`); text that is not JSON has no keys to merge.

    Read back into a Messages `tool_use.input` such an object keeps one of the values, and sent up as Chat's or
    Responses' `arguments` string (a tool call's, or an `mcp_approval_request`'s among the texts) the app's parser
    does the same: a value lost as `rename_keys` refuses to lose one. Found with the standard parser, which hands
    over each object's pairs before it makes a dict of them."""
    if not isinstance(sent, str) or sent == given:
        return

    def pairs(entries: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(entries)
        if len(made) != len(entries):
            seen: set[str] = set()
            for name, _ in entries:
                if name in seen:
                    raise _Merged(name)
                seen.add(name)
        return made

    try:
        json.loads(sent, object_pairs_hook=pairs)
    except _Merged as merged:
        name = merged.args[0]
        raise RequestRefused(f"a guardrail's edit would merge two keys of an object (onto {name!r})") from None
    except RecursionError:  # nested past what the parser can check: refused, not passed on unchecked
        raise RequestRefused("a guardrail's edit of a tool call is nested too deep to check for merged keys") from None
    except ValueError:
        pass


class _Merged(Exception):
    """A key found twice in one object, raised out of the parser (`refuse_merged_keys`)."""


def strings(
    value: Any,
    skipped: frozenset[str] = frozenset(),
    depth: int = 0,
    own: bool = True,
    named: frozenset[str] | None = None,
) -> Iterator[Slot]:
    """Every string value in a known record (its ids and the `skipped` fields left out), its free-form JSON fields
    given whole, keys and all; and, with `named` (the API's names of the record's fields, `RECORD_FIELDS`), every
    other key at any depth, a key's slot after its value's: a name a client made up, which a lenient app may show
    the model as it shows the record.

    Ids, types, roles and an encrypted content are left out at the record's own level only (`own`: the record, or
    each record of a list of them), and only while they hold what the API puts there (`fixed`): the API fixes them
    there. Deeper, where the API puts no such field, a `"status"` or a `"type"` is a string like any other, and
    given; so is the value of one of these fields that is free text or an object a client made up. The `skipped`
    fields are read by the caller (an image)."""
    if depth > MAX_DEPTH:
        raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        for index, inner in enumerate(value):
            if isinstance(inner, str):
                yield value, index
            else:
                yield from strings(inner, skipped, depth + 1, own, named)
        return
    if not isinstance(value, dict):
        return
    keys: KeyOf | None = None
    for key, inner in list(value.items()):
        if own and (key in skipped or (key in CHECKED and fixed(key, inner))):
            continue
        if isinstance(inner, str):
            yield value, key
        elif key in FREE_FORM:
            yield from every_string(inner, depth + 1)
        else:
            yield from strings(inner, skipped, depth + 1, False, named)
        if named is not None and key not in named:
            keys = keys or KeyOf(value)  # one for the object: its renames are made at once (`rename_keys`)
            yield keys, key


def read_fields(*names: str) -> frozenset[str]:
    """The fields of a known block, part, message or item its reader reads or leaves out on purpose, for
    `rest_slots`: `names`, and the ids and fixed words (HARMLESS) left out wherever they hold what the API puts
    there (`fixed`)."""
    return HARMLESS.union(names)


def plain(holder: dict[str, Any], read: frozenset[str]) -> bool:
    """Whether `rest_slots` has nothing to give of `holder`: it has only the fields `read` names, and its ids and
    fixed words (`CHECKED`) hold what the API puts there. An ordinary message or part is plain, and starts no walk
    (where there are many, messages, text parts, tool results and calls, a walk of each would cost the guardrail
    view of a long history a tenth more)."""
    return read.issuperset(holder) and all(fixed(key, holder[key]) for key in _CHECKED_REST.intersection(holder))


def rest_slots(holder: dict[str, Any], read: frozenset[str]) -> Iterator[Slot]:
    """The words of a known block's, part's, message's or item's fields that its reader does not name: a field
    the API adds later, or one a client made up, which a lenient app may show the model. `read` (`read_fields`)
    names the fields read elsewhere or left out on purpose (ids, fixed words, bytes, images, encrypted or signed
    content), but an id or fixed word that holds something else than the API puts there (`fixed`: a role none of
    the APIs has, free text in a `status`, an object a client made up in `cache_control`). Every string in them is
    given, and every key (the field's own name, and the keys within it) but the API's names (`API_FIELDS`): a
    word a client writes only in a made-up field's name is judged as in a block no reader knows, its mask written
    back as a rename. The caller looks first (`plain`): an ordinary message or part starts no walk."""
    keys = KeyOf(holder)
    for key, inner in holder.items():
        if key in read and (key not in _CHECKED_REST or fixed(key, inner)):
            continue
        if isinstance(inner, str):
            yield holder, key
        elif isinstance(inner, dict | list):
            yield from every_string(inner, 1, API_FIELDS)
        if key not in API_FIELDS:
            yield keys, key


# An image where the APIs put one: base64 (the strict alphabet, `=` padding only at the end, no whitespace), bare or
# behind a data URL of the four image types the APIs take. One compiled character class over the whole string, its
# length checked apart: 7 ms for a 5 MB image (6.8 MB of base64), where `binascii.a2b_base64(..., strict_mode=True)`
# takes 12 ms and decodes the whole image into memory, and a pattern of four-character groups (which would check the
# length too) 140 ms. Possessive (`*+`): a string that is not one fails in one pass, where backtracking over a 5 MB
# string with a space at its end took 130 ms.
_BASE64 = "[A-Za-z0-9+/]*+={0,2}+"
_IMAGE = re.compile(f"(?:data:image/(?:png|jpeg|gif|webp);base64,)?+{_BASE64}")
_BARE_IMAGE = re.compile(_BASE64)
# How the bytes of a PNG, JPEG and GIF begin; a WebP's are `RIFF`, four bytes of size, `WEBP` (`_opens_as_image`).
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8")


def is_image(text: str) -> bool:
    """Whether a whole string is an image and not words: strict base64 whose bytes open as a PNG, JPEG, GIF or
    WebP does, bare or in a `data:image/png|jpeg|gif|webp;base64,` URL. A field the API fills with an image may hold
    anything a client writes there: words after an image's first bytes, whitespace, another media type (a subtype is
    a token, and a token can be a word) make it a text, given to the guardrail. Fast on a multi-MB image: one C call
    checks the whole alphabet (a compiled `re.fullmatch`, cheaper than a strict `binascii.a2b_base64`: `_IMAGE`), and
    only the first 16 characters of the base64 are decoded."""
    return _IMAGE.fullmatch(text) is not None and _opens_as_image(text, text.find(",") + 1)  # bare: no comma


def is_base64_image(data: str) -> bool:
    """Whether `data` is bare base64 of an image by `is_image`'s rule: what a tool's image must be (`tool_results`),
    as its bytes are written into the next round where no guardrail reads them."""
    return _BARE_IMAGE.fullmatch(data) is not None and _opens_as_image(data, 0)


def _opens_as_image(text: str, start: int) -> bool:
    """Whether the base64 from `start` on (its alphabet checked) is whole, a length of fours, and its bytes open
    as a PNG, JPEG, GIF or WebP does."""
    if (len(text) - start) % 4:
        return False
    head = base64.b64decode(text[start : start + 16])
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def image_slots(holder: dict[str, Any], key: str, named: frozenset[str] | None = None) -> Iterator[Slot]:
    """A field the API fills with an image (a base64 string, or an object holding one): its strings that are not
    images (`is_image`) are given, so that words written where an image belongs are judged; with `named`, the
    other keys of such an object too (`strings`)."""
    value = holder.get(key)
    if isinstance(value, str):
        if not is_image(value):
            yield holder, key
        return
    for slot in strings(value, depth=1, named=named):
        if isinstance(slot[0], KeyOf) or not is_image(slot[0][slot[1]]):
            yield slot


def every_string(value: Any, depth: int = 0, named: frozenset[str] = frozenset()) -> Iterator[Slot]:
    """Every key and every string in a JSON value, at any depth, but the keys `named` (the API's own names, for
    `rest_slots`): a key's slot after its value's slots, so that a value is written back before its key is
    renamed."""
    if depth > MAX_DEPTH:
        raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    keys = KeyOf(value) if isinstance(value, dict) else None
    for key, inner in list(items):
        if isinstance(inner, str):
            yield value, key
        else:
            yield from every_string(inner, depth + 1, named)
        if keys is not None and key not in named:
            yield keys, key


def unknown_slots(block: dict[str, Any]) -> Iterator[Slot]:
    """A block, part or item of a type no reader knows: every key and string in it, its type too (an app that shows
    what it does not know may show that), but its own ids and fixed words where they hold what the API puts there
    (`fixed`)."""
    keys = KeyOf(block)
    for key, inner in list(block.items()):
        if key in HARMLESS and key != "type" and fixed(key, inner):
            continue
        if isinstance(inner, str):
            yield block, key
        else:
            yield from every_string(inner, 1)
        yield keys, key
