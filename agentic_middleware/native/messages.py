"""Anthropic Messages: `server_tool_use` and `web_search_tool_result` blocks, `web_search_result_location` citations,
`usage.server_tool_use.web_search_requests`; on the next turn, `tool_use` and `tool_result` again."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import RequestRefused
from ..payload import JSONObject
from . import (
    CITED_CHARS,
    NativeCall,
    NativeFormat,
    NativeRound,
    NativeRun,
    citations,
    encode_text,
    query_of,
    replay,
)
from .replay import NOTHING, checked

RECORD_TYPES = frozenset({"server_tool_use", "web_search_tool_result"})
CITATION_TYPE = "web_search_result_location"


def server_id(call_id: Any) -> str:
    """The record's id for the app's call id: `toolu_x` becomes `srvtoolu_x` (a call without one gets a new one)."""
    call_id = call_id if isinstance(call_id, str) and call_id else os.urandom(12).hex()
    return f"srvtoolu_{call_id.removeprefix('toolu_')}"


def server_tool_use(search: NativeCall | NativeRun, block_id: str) -> dict[str, Any]:
    """A call's `server_tool_use` block."""
    return {"type": "server_tool_use", "id": block_id, "name": search.name, "input": search.call.get("input") or {}}


def pair(run: NativeRun, block_id: str) -> list[dict[str, Any]]:
    """A call's `server_tool_use` block and its `web_search_tool_result` block."""
    content: Any
    if run.error_code is not None:
        content = {"type": "web_search_tool_result_error", "error_code": run.error_code}
    else:
        content = [
            {
                "type": "web_search_result",
                "url": source.url,
                "title": source.title,
                "encrypted_content": encode_text(source.text),
                "page_age": source.page_age,
            }
            for source in run.result.sources
        ]
    return [
        server_tool_use(run, block_id),
        {"type": "web_search_tool_result", "tool_use_id": block_id, "content": content},
    ]


def _is_run(block: Any, run: NativeRun) -> bool:
    return block is run.call or (bool(block.get("id")) and block.get("id") == run.call.get("id"))


def cited(text: str, runs: Sequence[tuple[NativeRun, str]]) -> list[dict[str, Any]]:
    """The `web_search_result_location` citations of a text that names the URLs of these runs' results (each run with
    its record's id), in the runs' order, then the results' order: one per URL, of the first result that has it (as
    Responses gives one `url_citation` per mention, not one per search that found the URL)."""
    found: dict[str, dict[str, Any]] = {}
    for run, block_id in runs:
        for number, source, _ in citations(text, run.cited_sources()):
            found.setdefault(
                source.url,
                {
                    "type": CITATION_TYPE,
                    "url": source.url,
                    "title": source.title,
                    "encrypted_index": encode_text(f"{block_id}:{number}"),
                    "cited_text": " ".join(source.text.split())[:CITED_CHARS],
                },
            )
    return list(found.values())


class MessagesNative(NativeFormat):
    def record(self, final: dict[str, Any], round: NativeRound) -> dict[str, Any]:
        usage = dict(final.get("usage") or {})
        counted = dict(usage.get("server_tool_use") or {})
        counted["web_search_requests"] = (counted.get("web_search_requests") or 0) + round.searches()
        counted.setdefault("web_fetch_requests", 0)
        usage["server_tool_use"] = counted
        if round.streamed:  # the records and the citations went out live (MessagesRelay): the count is what is left
            return JSONObject(final, usage=usage)
        ids = [server_id(run.call.get("id")) for run in round.runs]
        shown: list[Any] = []
        for block in round.response.get("content") or ():
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                shown.append(block)  # the round's text and thinking, where the model put them
                continue
            position = next((at for at, run in enumerate(round.runs) if _is_run(block, run)), None)
            if position is not None:
                shown += pair(
                    round.runs[position], ids[position]
                )  # other calls (the server's other tools, the client's own) stay out of it
        content = final.get("content")
        runs = list(zip(round.runs, ids, strict=True))
        later = [_cited(block, runs) for block in (content if isinstance(content, list) else ())]
        return JSONObject(final, content=[*shown, *later], usage=usage)

    def served(self, body: dict[str, Any], renamed: Mapping[str, str]) -> dict[str, Any]:
        choice = body.get("tool_choice")
        name = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
        if isinstance(choice, dict) and isinstance(name, str) and name in renamed:
            return {**body, "tool_choice": {**choice, "name": renamed[choice["name"]]}}
        return body

    def request(self, body: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        _refuse_misplaced(messages, names)
        if not any(_recorded(turn) for turn in messages):
            return body
        return {**body, "messages": list(_turned_back(messages, names))}


def _cited(block: Any, runs: Sequence[tuple[NativeRun, str]]) -> Any:
    """A text block with citations of the runs' results whose URLs it names, in front of any it has."""
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        return block
    found = cited(block["text"], runs)
    if not found:
        return block
    urls = {citation["url"] for citation in found}  # a later round's citation of the same URL gives way (one per URL)
    kept = [
        citation
        for citation in block.get("citations") or []
        if not (isinstance(citation, dict) and citation.get("type") == CITATION_TYPE and citation.get("url") in urls)
    ]
    return {**block, "citations": [*found, *kept]}


def _recorded(turn: Any) -> bool:
    content = turn.get("content") if isinstance(turn, dict) and turn.get("role") == "assistant" else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and (_kind(block) in RECORD_TYPES or CITATION_TYPE in _citation_types(block))
        for block in content
    )


def _refuse_misplaced(messages: list[Any], names: Mapping[str, str]) -> None:
    """A record of our tool outside an assistant turn is refused, as Anthropic refuses it: only the assistant's
    turns are turned back, so one elsewhere would reach the app in a vocabulary it does not know."""
    for at, turn in enumerate(messages):
        content = turn.get("content") if isinstance(turn, dict) and turn.get("role") != "assistant" else None
        for number, block in enumerate(content if isinstance(content, list) else ()):
            kind = _kind(block) if isinstance(block, dict) else None
            name = block.get("name") if kind == "server_tool_use" else None
            if kind == "web_search_tool_result" or (isinstance(name, str) and name in names):
                where = f"messages[{at}].content[{number}]"
                raise RequestRefused(f"{where}: a {kind} block belongs in an assistant turn", param=where)


def _kind(block: dict[str, Any]) -> str | None:
    kind = block.get("type")
    return kind if isinstance(kind, str) else None


def _citation_types(block: dict[str, Any]) -> set[str]:
    cited = block.get("citations")
    return {_kind(item) or "" for item in cited if isinstance(item, dict)} if isinstance(cited, list) else set()


def _uncited(block: Any) -> Any:
    """A text block without the citations of our records, which the app never made."""
    if not isinstance(block, dict) or CITATION_TYPE not in _citation_types(block):
        return block
    kept = [item for item in block["citations"] if not (isinstance(item, dict) and _kind(item) == CITATION_TYPE)]
    return {key: value for key, value in block.items() if key != "citations"} | ({"citations": kept} if kept else {})


def _call(block: dict[str, Any], where: str) -> tuple[str, str, dict[str, Any]]:
    """A `server_tool_use` block's id, name and input, checked."""
    call_id = checked(block.get("id", NOTHING), str, f"{where}.id", optional=False)
    name = checked(block.get("name", NOTHING), str, f"{where}.name", optional=False)
    given = checked(block.get("input", NOTHING), dict, f"{where}.input")
    return call_id, name, given or {}


def _result(block: dict[str, Any], where: str, call: dict[str, Any]) -> dict[str, Any]:
    """A `web_search_tool_result` block as the app's `tool_result`: its results, its error, or (no `content`) that
    the results are not in the history."""
    content = checked(block.get("content", NOTHING), (list, dict), f"{where}.content")
    code = None
    if isinstance(content, dict):
        code = checked(content.get("error_code", NOTHING), str, f"{where}.content.error_code", optional=False)
    found = replay.sources(content, f"{where}.content") if isinstance(content, list) else None
    text, failed = replay.result_text(query_of(call["input"]), found, code, call["name"])
    return {"type": "tool_result", "tool_use_id": call["id"], "content": text} | ({"is_error": True} if failed else {})


def _turned_back(messages: list[Any], names: Mapping[str, str]) -> Iterator[Any]:
    """The history with each run of records in an assistant turn split into the app's own turns: the assistant turn
    up to and with the calls (as `tool_use`), a user turn with their results (joined to the next user turn, results
    first), then the assistant turn's rest. A call whose result block is not there gets a result that says so."""
    carry: list[dict[str, Any]] = []  # results waiting for the next user turn
    for at, turn in enumerate(messages):
        if carry:
            if isinstance(turn, dict) and turn.get("role") == "user":
                own = turn.get("content")
                own = [{"type": "text", "text": own}] if isinstance(own, str) else list(own or [])
                yield {**turn, "content": [*carry, *own]}
                carry = []
                continue
            yield {"role": "user", "content": carry}
            carry = []
        if not _recorded(turn):
            yield turn
            continue
        calls: dict[str, dict[str, Any]] = {}  # this turn's calls of our tools, by id
        answered: set[str] = set()
        part: list[Any] = []
        results: dict[str, dict[str, Any]] = {}  # the current run's calls, in order, with their results once seen
        for number, block in enumerate(turn["content"]):
            where = f"messages[{at}].content[{number}]"
            kind = _kind(block) if isinstance(block, dict) else None
            if kind == "server_tool_use":
                call_id, name, given = _call(block, where)
                if name in names:
                    if call_id in calls:
                        raise RequestRefused(
                            f"{where}.id: {call_id!r} is the id of an earlier server_tool_use", param=f"{where}.id"
                        )
                    calls[call_id] = {"id": call_id, "name": name, "input": given}
                    part.append({"type": "tool_use", "id": call_id, "name": names[name], "input": given})
                    results[call_id] = {}
                    continue
            elif kind == "web_search_tool_result":
                call_id = checked(block.get("tool_use_id", NOTHING), str, f"{where}.tool_use_id", optional=False)
                if call_id not in calls or call_id in answered:
                    raise RequestRefused(
                        f"{where}.tool_use_id: {call_id!r} is not the id of a server_tool_use before it in this turn"
                        if call_id not in calls
                        else f"{where}.tool_use_id: the server_tool_use {call_id!r} has a result already, or other"
                        " blocks stand between them",
                        param=f"{where}.tool_use_id",
                    )
                answered.add(call_id)
                results[call_id] = _result(block, where, calls[call_id])
                continue
            if any(results.values()):  # the calls' results end here: the app's turns around them
                answered.update(results)  # a result later in the turn would answer a call already answered
                yield {**turn, "content": part}
                yield {"role": "user", "content": _completed(results, calls)}
                part, results = [], {}
            part.append(_uncited(block))
        if results:
            yield {**turn, "content": part}
            carry = _completed(results, calls)
        elif part:
            yield {**turn, "content": part}
    if carry:
        yield {"role": "user", "content": carry}


def _completed(results: dict[str, dict[str, Any]], calls: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's results in its calls' order; a call without one gets a result saying its results are not here."""
    return [
        result
        or {"type": "tool_result", "tool_use_id": call_id, "content": replay.unseen(query_of(calls[call_id]["input"]))}
        for call_id, result in results.items()
    ]
