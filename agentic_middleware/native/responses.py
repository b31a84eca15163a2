"""OpenAI Responses: `web_search_call` output items and `url_citation` annotations; on the next turn, a
`function_call` and its `function_call_output` again."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..payload import JSONObject
from ..reasoning import kept_positions
from . import UNAVAILABLE, NativeCall, NativeFormat, NativeRound, NativeRun, Source, citations, encode_text, replay
from .replay import NOTHING, checked

CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
RECORD_TYPE = "web_search_call"


def record_id(call: Mapping[str, Any]) -> str:
    """The item's id for the app's call: `ws_` and the call's own."""
    own = call.get("call_id") or call.get("id")
    own = own if isinstance(own, str) and own else os.urandom(12).hex()
    return f"ws_{own.removeprefix('call_').removeprefix('fc_')}"


def searching(search: NativeCall) -> dict[str, Any]:
    """The `web_search_call` item of a call still searching, as its `response.output_item.added` gives it."""
    return {
        "type": RECORD_TYPE,
        "id": record_id(search.call),
        "status": "in_progress",
        "action": {"type": "search", "query": search.query, "sources": []},
    }


def web_search_call(run: NativeRun) -> dict[str, Any]:
    """The `web_search_call` item of one call; `results` (not in the SDK's type, which keeps it) carries what the
    model read to the next turn, as `encrypted_content` does on Messages. A tool's plain text has no results to
    carry: the item has none, and the next turn says the results are not in the history (see replay.py)."""
    sources = run.result.sources
    item: dict[str, Any] = {
        "type": RECORD_TYPE,
        "id": record_id(run.call),
        "status": "failed" if run.error_code else "completed",
        "action": {"type": "search", "query": run.query, "sources": [{"type": "url", "url": s.url} for s in sources]},
    }
    if run.error_code is not None or run.holds_results():
        item["results"] = [
            {"url": s.url, "title": s.title, "encrypted_content": encode_text(s.text), "page_age": s.page_age}
            for s in sources
        ]
    return item


def _is_run(item: Any, run: NativeRun) -> bool:
    return item is run.call or (bool(item.get("call_id")) and item.get("call_id") == run.call.get("call_id"))


def url_citations(text: str, sources: Sequence[Source]) -> list[dict[str, Any]]:
    """The `url_citation` annotations of a text that names these results' URLs, in the order they stand in it."""
    return [
        {"type": "url_citation", "start_index": start, "end_index": start + len(s.url), "url": s.url, "title": s.title}
        for _, s, start in sorted(citations(text, sources), key=lambda found: found[2])
    ]


class ResponsesNative(NativeFormat):
    def record(self, final: dict[str, Any], round: NativeRound) -> dict[str, Any]:
        if round.streamed:  # its items and annotations went out live (ResponsesRelay)
            return final
        output = [item for item in round.response.get("output") or () if isinstance(item, dict)]
        runs = [next((run for run in round.runs if _is_run(item, run)), None) for item in output]
        left_out = {i for i, item in enumerate(output) if item.get("type") in CALL_TYPES and runs[i] is None}
        shown = []
        for index in kept_positions(output, left_out):  # other calls leave, with a reasoning item that led to no other
            run = runs[index]
            shown.append(output[index] if run is None else web_search_call(run))
        later = final.get("output")
        later = [self._cited(item, round) for item in (later if isinstance(later, list) else ())]
        return JSONObject(final, output=[*shown, *later])

    def _cited(self, item: Any, round: NativeRound) -> Any:
        if not isinstance(item, dict) or item.get("type") != "message" or not isinstance(item.get("content"), list):
            return item
        sources = round.sources()
        parts = []
        for part in item["content"]:
            text = part.get("text") if isinstance(part, dict) and part.get("type") == "output_text" else None
            found = url_citations(text, sources) if isinstance(text, str) else []
            if found:
                part = {**part, "annotations": [*found, *(part.get("annotations") or [])]}
            parts.append(part)
        return {**item, "content": parts}

    def served(self, body: dict[str, Any], renamed: Mapping[str, str]) -> dict[str, Any]:
        """A `tool_choice` forcing the hosted tool forces our function; `include` loses the `web_search_call.*`
        entries, which name items the app never makes (the records' fields are always given to the client)."""
        body = dict(body)
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in renamed:
            body["tool_choice"] = {"type": "function", "name": renamed[choice["type"]]}
        include = body.get("include")
        if isinstance(include, list):
            kept = [entry for entry in include if not (isinstance(entry, str) and entry.startswith(f"{RECORD_TYPE}."))]
            if kept:
                body["include"] = kept
            else:
                del body["include"]
        return body

    def request(self, body: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
        items = body.get("input")
        name = names.get("web_search")
        if name is None or not isinstance(items, list):
            return body
        if not any(isinstance(item, dict) and item.get("type") == RECORD_TYPE for item in items):
            return body
        turned: list[Any] = []
        for number, item in enumerate(items):
            if not isinstance(item, dict) or item.get("type") != RECORD_TYPE:
                turned.append(_uncited(item))
                continue
            call_id, query, text = _replayed(item, f"input[{number}]", name)
            arguments = orjson.dumps({"query": query} if query is not None else {}).decode()
            turned.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
            turned.append({"type": "function_call_output", "call_id": call_id, "output": text})
        return {**body, "input": turned}


def _replayed(item: dict[str, Any], where: str, name: str) -> tuple[str, str | None, str]:
    """A `web_search_call` item, checked: its id, its query, and the text of its results for the app.

    The results are the item's `results` (ours: what the model read), else the URLs of `action.sources`; an item
    with neither (Codex's, which keeps only the query; OpenAI gives `sources` only when asked) says nothing of what
    the search found, and the model is told its results are not in the history.
    """
    call_id = checked(item.get("id", NOTHING), str, f"{where}.id") or record_id({})
    status = checked(item.get("status", NOTHING), str, f"{where}.status")
    action = checked(item.get("action", NOTHING), dict, f"{where}.action") or {}
    query = checked(action.get("query", NOTHING), str, f"{where}.action.query")
    results = checked(item.get("results", NOTHING), list, f"{where}.results")
    listed = checked(action.get("sources", NOTHING), list, f"{where}.action.sources")
    if results is not None:
        found: list[Source] | None = replay.sources(results, f"{where}.results")
    elif listed:  # a client that kept only the SDK's fields: the URLs are what is left
        found = [Source(s.url, "") for s in replay.sources(listed, f"{where}.action.sources")]
    else:
        found = None
    text, _ = replay.result_text(query, found, UNAVAILABLE if status == "failed" else None, name)
    return call_id, query, text


def _uncited(item: Any) -> Any:
    """An assistant message without the `url_citation` annotations the middleware added."""
    if (
        not isinstance(item, dict)
        or item.get("type", "message") != "message"
        or not isinstance(item.get("content"), list)
    ):
        return item
    parts = [
        {
            **part,
            "annotations": [
                a for a in part["annotations"] if not (isinstance(a, dict) and a.get("type") == "url_citation")
            ],
        }
        if isinstance(part, dict) and isinstance(part.get("annotations"), list)
        else part
        for part in item["content"]
    ]
    return {**item, "content": parts}
