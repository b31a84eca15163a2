"""The words of native web-search records in a request's history, as a guardrail's `apply_guardrail` is given them.

A client sends back the records of earlier searches (Messages `server_tool_use` and `web_search_tool_result` blocks,
citations on text blocks, Responses `web_search_call` items), and the next turn turns them into text the model reads
(native/messages.py, native/responses.py): the query (a `server_tool_use`'s whole `input`, keys too, and its
name), each result's title, URL, age and page text (our `encrypted_content`, `amw1.` and the text in base64). A
client can forge any of them, so a guardrail is given each of these words like any other text, and what it
returns is written back to its place: a page text encoded again as `amw1.`, and only when the guardrail changed it
(a request it leaves alone reaches the app byte for byte).

Fail closed: an `amw1.` content that does not decode, or a record's field of a shape no guardrail can read (a title
that is a number, results that are an object), refuses the request with a 400 in the route's shape. An
`encrypted_content` that is not ours (Anthropic's own, decrypted by Anthropic alone) is neither decoded nor given: no
guardrail can read it, and the model does not read it as text from us (the next turn keeps its title and URL only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .guardrail_opaque import CITATION, opaque_slots
from .guardrail_walk import Slot, every_string, plain, read_fields, rest_slots, string_slot, unreadable
from .native import encode_text, read_text

# A result's fields the next turn gives the model as text (format_sources), `encrypted_content` decoded.
_RESULT_FIELDS = ("title", "url", "page_age")
_RESULT_READ = read_fields(*_RESULT_FIELDS, "encrypted_content")
# A citation's fields that hold words (Anthropic's citation types: `cited_text`, a title by one name or the other,
# a web result's URL and a search result's source).
_CITATION_FIELDS = ("cited_text", "title", "document_title", "url", "source")
# ...and the rest of a citation is walked (rest_slots) but for its `encrypted_index`, Anthropic's own, left out
# while it is one token (guardrail_opaque.CITATION).
_CITATION_READ = read_fields(*_CITATION_FIELDS, "encrypted_index")
# A Responses search action's fields that hold words, besides its lists of `queries` and `sources`.
_ACTION_FIELDS = ("query", "url", "pattern")
_ACTION_READ = read_fields(*_ACTION_FIELDS, "queries", "sources")
# What the readers here read of the records themselves: the rest of each is walked (rest_slots).
_QUERY_READ = read_fields("input", "name")
_RESULTS_READ = read_fields("content")
_ERROR_READ = read_fields("error_code")
_SEARCH_CALL_READ = read_fields("action", "results")
_SOURCE_READ = read_fields("url")


class _Encoded:
    """An `encrypted_content` of ours as the slot of the text it carries: read decoded, written back encoded, and
    only when the text changed (else the client's bytes stay as they were)."""

    __slots__ = ("holder", "text")

    def __init__(self, holder: dict[str, Any], text: str) -> None:
        self.holder = holder
        self.text = text

    def __getitem__(self, key: str) -> str:
        return self.text

    def __setitem__(self, key: str, text: str) -> None:
        if text != self.text:
            self.holder[key] = encode_text(text)


def citation_slots(part: dict[str, Any]) -> Iterator[Slot]:
    """A content part's citations' words: each citation's `cited_text`, title, URL and source, of whatever type."""
    cited = part.get("citations")
    if cited is None:
        return
    if not isinstance(cited, list):
        raise unreadable(f"citations that are {type(cited).__name__}")
    for citation in cited:
        if not isinstance(citation, dict):
            raise unreadable(f"a citation that is {type(citation).__name__}")
        for key in _CITATION_FIELDS:
            yield from string_slot(citation, key)
        yield from opaque_slots(citation, CITATION)
        if not plain(citation, _CITATION_READ):
            yield from rest_slots(citation, _CITATION_READ)


def block_slots(block: dict[str, Any], skip_tool: bool) -> Iterator[Slot]:
    """A Messages block's record words: a `server_tool_use`'s input (its `query`: every key and string in it) and
    name, and, unless tool texts are skipped, a `web_search_tool_result`'s results or error code."""
    kind = block.get("type")
    if kind == "server_tool_use":
        given = block.get("input")
        if given is not None and not isinstance(given, dict):
            raise unreadable(f"a server_tool_use input that is {type(given).__name__}")
        yield from every_string(given or {})
        yield from string_slot(block, "name")
        if not plain(block, _QUERY_READ):
            yield from rest_slots(block, _QUERY_READ)
    elif kind == "web_search_tool_result" and not skip_tool:
        content = block.get("content")
        if not plain(block, _RESULTS_READ):
            yield from rest_slots(block, _RESULTS_READ)
        if isinstance(content, dict):
            yield from string_slot(content, "error_code")
            if not plain(content, _ERROR_READ):
                yield from rest_slots(content, _ERROR_READ)
        elif isinstance(content, list):
            yield from _results(content)
        elif content is not None:
            raise unreadable(f"a web_search_tool_result content that is {type(content).__name__}")


def web_search_call_slots(item: dict[str, Any], skip_tool: bool) -> Iterator[Slot]:
    """A Responses `web_search_call` item's words: its action's query (and `queries`, a URL, a pattern), and, unless
    tool texts are skipped, its sources' URLs and its `results` (ours: what the model read)."""
    action = item.get("action")
    if action is not None and not isinstance(action, dict):
        raise unreadable(f"a web_search_call action that is {type(action).__name__}")
    action = action or {}
    for key in _ACTION_FIELDS:
        yield from string_slot(action, key)
    queries = _listed(action, "queries")
    for index, query in enumerate(queries):
        if not isinstance(query, str):
            raise unreadable(f"a query that is {type(query).__name__}")
        yield queries, index
    if not plain(action, _ACTION_READ):
        yield from rest_slots(action, _ACTION_READ)
    if not plain(item, _SEARCH_CALL_READ):
        yield from rest_slots(item, _SEARCH_CALL_READ)
    if skip_tool:
        return
    for source in _listed(action, "sources"):
        if not isinstance(source, dict):
            raise unreadable(f"a source that is {type(source).__name__}")
        yield from string_slot(source, "url")
        if not plain(source, _SOURCE_READ):
            yield from rest_slots(source, _SOURCE_READ)
    yield from _results(_listed(item, "results"))


def _listed(holder: dict[str, Any], key: str) -> list[Any]:
    value = holder.get(key)
    if value is not None and not isinstance(value, list):
        raise unreadable(f"{key} that are {type(value).__name__}")
    return value or []


def _results(results: list[Any]) -> Iterator[Slot]:
    """Each result's title, URL and age, and the page text its `encrypted_content` carries when ours."""
    for result in results:
        if not isinstance(result, dict):
            raise unreadable(f"a search result that is {type(result).__name__}")
        for key in _RESULT_FIELDS:
            yield from string_slot(result, key)
        if not plain(result, _RESULT_READ):
            yield from rest_slots(result, _RESULT_READ)
        content = result.get("encrypted_content")
        if isinstance(content, str):
            try:
                text = read_text(content)
            except ValueError:
                raise unreadable("an amw1. encrypted_content that does not decode") from None
            if text is not None:
                yield _Encoded(result, text), "encrypted_content"
        elif content is not None:
            raise unreadable(f"an encrypted_content that is {type(content).__name__}")
