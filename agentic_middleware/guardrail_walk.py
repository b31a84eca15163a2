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
what the API puts there (guardrail_values.py: `fixed`, `is_image`); anything else in them (free text, an object a
client made up) is given as a field no reader names is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import RequestRefused
from .guardrail_values import CHECKED, HARMLESS, file_data_type, fixed, is_byte_type, is_image

Slot = tuple[Any, Any]  # (container, key): where one text stands

# How deep a walk goes before it refuses: far past any real record, well within Python's recursion limit.
MAX_DEPTH = 64

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
        # a structured output's schema: whether it binds the model
        "strict",
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


_DATA_URL_START = re.compile(r"\s*data:", re.IGNORECASE)


def refuse_text_base64(value: str, what: str) -> None:
    """Refuses a data URL of base64 of a type other than one whose bytes the walk can tell (a PDF, an image, audio,
    a video: `is_byte_type`), or of none: a provider decodes it for the model to read (a text, JSON, code), which a
    guardrail given base64 could not judge. Failing closed: a list of text types always misses one."""
    declared = file_data_type(value)
    if declared is not None and not is_byte_type(declared):
        raise unreadable(f"{what} of {declared or 'no media type'} in base64")


def refuse_data_url(value: str) -> None:
    """Refuses a string found where no reader names media (a made-up field, a block, part or item no reader knows,
    a record's fields) that is a data URL of a text's base64 (`refuse_text_base64`): an app that reads media
    wherever it finds it (LiteLLM's bridges turn such items into messages) hands it to a provider to decode. Any
    other string there is given as words (a data URL of an image, a PDF or audio too: its base64 is no words to the
    model either)."""
    if _DATA_URL_START.match(value) is not None:
        refuse_text_base64(value.lstrip(), "an unread field's data URL")


# A JSON escape of a space, a letter or a digit (`\u0049` for `I`), after an even run of backslashes: no JSON
# encoder writes one (they escape quotes, backslashes, control characters, non-ASCII text, some `<>&'` for HTML), but
# it hides the word it spells from a guardrail given the JSON as text, where the app (or LiteLLM) decodes it.
_ESCAPED_WORD = re.compile(r"(?<!\\)(?:\\\\)*\\u00(?:20|3[0-9]|[46][1-9a-fA-F]|[57][0-9aA])")


def refuse_escaped_words(value: Any, what: str) -> None:
    """Refuses JSON held in a string (a tool call's arguments, LiteLLM's own `encrypted_content`) that spells a
    space, a letter or a digit as an escape (`_ESCAPED_WORD`): its words would reach the model unseen by a guardrail
    given the JSON as text. Only JSON: a custom tool's free text (Codex's `apply_patch` of code holding `'\u0041'`)
    is the model's words as they are, decoded by no one."""
    if not isinstance(value, str) or "\\u00" not in value or _ESCAPED_WORD.search(value) is None:
        return
    if value.startswith("litellm_enc:") and ";" in value:  # LiteLLM's wrapper: its model's id, then the JSON
        value = value.split(";", 1)[1]
    try:
        json.loads(value)
    except (ValueError, RecursionError):
        return
    raise unreadable(f"{what} spelling letters as JSON escapes")


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
                refuse_data_url(inner)
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
        if key == "encrypted_content":  # not one token: LiteLLM's own JSON, which it decodes for the model
            refuse_escaped_words(inner, "an encrypted_content")
        elif key == "arguments" and own:  # an `mcp_approval_request`'s, JSON as a call's are
            refuse_escaped_words(inner, "a tool call's arguments")
        if isinstance(inner, str):
            refuse_data_url(inner)
            yield value, key
        elif key in FREE_FORM:  # a tool's own input: what it was called with, no media an app reads
            yield from every_string(inner, depth + 1, media=False)
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
    return read.issuperset(holder) and all(fixed(key, holder[key]) for key in CHECKED.intersection(holder))


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
        if key in read and (key not in CHECKED or fixed(key, inner)):
            continue
        if key == "encrypted_content":  # not one token: LiteLLM's own JSON, which it decodes for the model
            refuse_escaped_words(inner, "an encrypted_content")
        if isinstance(inner, str):
            refuse_data_url(inner)
            yield holder, key
        elif isinstance(inner, dict | list):
            yield from every_string(inner, 1, API_FIELDS)
        if key not in API_FIELDS:
            yield keys, key


def image_slots(holder: dict[str, Any], key: str, named: frozenset[str] | None = None) -> Iterator[Slot]:
    """A field the API fills with an image (a base64 string, or an object holding one): its strings that are not
    images (`is_image`) are given, so that words written where an image belongs are judged; with `named`, the
    other keys of such an object too (`strings`)."""
    value = holder.get(key)
    if isinstance(value, str):
        if not is_image(value):
            refuse_data_url(value)
            yield holder, key
        return
    for slot in strings(value, depth=1, named=named):
        if isinstance(slot[0], KeyOf) or not is_image(slot[0][slot[1]]):
            yield slot


def every_string(value: Any, depth: int = 0, named: frozenset[str] = frozenset(), media: bool = True) -> Iterator[Slot]:
    """Every key and every string in a JSON value, at any depth, but the keys `named` (the API's own names, for
    `rest_slots`): a key's slot after its value's slots, so that a value is written back before its key is
    renamed. Where an app may read media (`media`: all but a tool's own input), a data URL of a text is refused
    (`refuse_data_url`)."""
    if depth > MAX_DEPTH:
        raise unreadable(f"a value nested deeper than {MAX_DEPTH} levels")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    keys = KeyOf(value) if isinstance(value, dict) else None
    for key, inner in list(items):
        if isinstance(inner, str):
            if media:
                refuse_data_url(inner)
            yield value, key
        else:
            yield from every_string(inner, depth + 1, named, media)
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
            refuse_data_url(inner)
            yield block, key
        else:
            yield from every_string(inner, 1)
        yield keys, key
