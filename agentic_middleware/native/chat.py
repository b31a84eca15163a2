"""OpenAI Chat Completions: no native records, but `web_search_options` served by the mapped tool and
`url_citation` annotations on the message where the model cites a result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import RequestRefused
from ..payload import JSONObject
from . import NativeFormat, NativeRound, citations
from .domains import shown

OPTIONS_FIELD = "web_search_options"


class ChatNative(NativeFormat):
    def declared(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        options = body.get(OPTIONS_FIELD)
        if options is not None and not isinstance(options, dict):
            raise RequestRefused(f"{OPTIONS_FIELD} must be an object, got {shown(options)}", param=OPTIONS_FIELD)
        return [(OPTIONS_FIELD, {**options, "type": "web_search"})] if isinstance(options, dict) else []

    def request(self, body: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
        if "web_search" not in names:
            return body
        messages = body.get("messages")
        body = {key: value for key, value in body.items() if key != OPTIONS_FIELD}  # served here, not by the app
        if isinstance(messages, list) and any(_cited(turn) for turn in messages):
            body["messages"] = [
                {key: value for key, value in turn.items() if key != "annotations"} if _cited(turn) else turn
                for turn in messages
            ]
        return body

    def record(self, final: dict[str, Any], round: NativeRound) -> dict[str, Any]:
        choices = final.get("choices")
        if not isinstance(choices, list):
            return final
        sources = round.sources()
        return JSONObject(final, choices=[_annotated(choice, sources) for choice in choices])


def _cited(turn: Any) -> bool:
    annotations = turn.get("annotations") if isinstance(turn, dict) else None
    return isinstance(annotations, list) and any(
        isinstance(a, dict) and a.get("type") == "url_citation" for a in annotations
    )


def _annotated(choice: Any, sources: Any) -> Any:
    message = choice.get("message") if isinstance(choice, dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    found = sorted(citations(text, sources), key=lambda found: found[2]) if isinstance(text, str) else []
    if not found:
        return choice
    annotations = [
        {
            "type": "url_citation",
            "url_citation": {"start_index": start, "end_index": start + len(s.url), "url": s.url, "title": s.title},
        }
        for _, s, start in found
    ]
    assert isinstance(message, dict)
    return {**choice, "message": {**message, "annotations": [*annotations, *(message.get("annotations") or [])]}}
