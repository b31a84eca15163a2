"""Native records a client sends back in its history: checked, then turned into the text the model read.

A record is the client's data: one of the wrong shape (a list as an id, an object as a name) is refused with a 400
naming its field, as the provider's API refuses it, never read as something else. A record that does not carry its
results (Codex sends back a `web_search_call` with only its query; a history may lose a `web_search_tool_result`)
tells the model that the results are not in the history, never that the search found nothing: only a record that
holds an empty list of results says that.
"""

from __future__ import annotations

from typing import Any

from ..errors import RequestRefused
from ..tool_results import Source
from . import decode_text, format_sources
from .domains import shown

NOTHING = object()  # a field the record does not have
_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}


def unseen(query: str | None) -> str:
    """The text of a search whose results the history does not hold."""
    search = f'The search for "{query}"' if query else "This search"
    return (
        f"{search} ran in an earlier turn, but its results are not in this conversation's history, so what it found"
        " is unknown here (not that it found nothing): search again to read them."
    )


def checked(value: Any, kinds: type | tuple[type, ...], where: str, optional: bool = True) -> Any:
    """The value when it is of one of `kinds` (or absent or null, when `optional`); a 400 naming `where` else."""
    if (value is NOTHING or value is None) and optional:
        return None
    if isinstance(value, kinds) and not isinstance(value, bool):
        return value
    names = " or ".join(_NAMES[kind] for kind in _tuple(kinds))
    got = shown(value) if value is not NOTHING else "nothing"
    raise RequestRefused(f"{where} must be {names}, got {got}", param=where)


def sources(results: list[Any], where: str) -> list[Source]:
    """A record's results (Anthropic's `web_search_result` objects, our Responses `results`), checked."""
    found = []
    for number, item in enumerate(results):
        at = f"{where}[{number}]"
        item = checked(item, dict, at, optional=False)
        url = checked(item.get("url", NOTHING), str, f"{at}.url", optional=False)
        title = checked(item.get("title", NOTHING), str, f"{at}.title")
        content = checked(item.get("encrypted_content", NOTHING), str, f"{at}.encrypted_content")
        age = checked(item.get("page_age", NOTHING), str, f"{at}.page_age")
        found.append(Source(url, title or "", decode_text(content), age))
    return found


def result_text(query: str | None, found: list[Source] | None, error_code: str | None, name: str) -> tuple[str, bool]:
    """The text of a native record for the app's own tool result, and whether it is an error: the error, the
    results (none found: the record said so), or that they are not in the history (`found` None)."""
    if error_code is not None:
        return f"{name} error: {error_code}", True
    if found is None:
        return unseen(query), False
    return format_sources(query, found), False


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)
