"""The native web search's records in a Responses stream (native/): each call the server ran shows as a
`web_search_call` item between rounds, announced while it runs, with the reasoning item that led to it, and the
`output_text` after it gets `url_citation` annotations of its results, as the JSON path's final answer has them.

Its own module because it is a feature apart from the relay's placing and numbering of events
(responses_relay.py), which mixes it in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import sse
from ..native import NativeCall, NativeRun
from ..native.responses import searching, url_citations, web_search_call
from ..reasoning import leading
from .responses import is_call


class SearchRecords:
    """The records of `ResponsesRelay`: the native calls recorded so far (`rounds`, by round), where in `recorded`
    (the record items that went out after this round's items) the announced ones are (`announced`), our
    annotations (`annotated`, by item and part) and the items as the client got them annotated (`shown`)."""

    __slots__ = ()

    emit: sse.ResponsesSequence
    started: bool
    base: int
    items: dict[int, Any]
    released: set[int]
    reasoned: set[int]
    shown: dict[int, Any]
    recorded: list[Any]
    rounds: dict[int, list[NativeRun]]
    announced: dict[int, int]
    annotated: dict[tuple[Any, Any], list[dict[str, Any]]]

    @property
    def next_position(self) -> int:
        """The client's `output_index` of the next item sent: after every item sent or recorded so far."""
        return self.base + len(self.released) + len(self.recorded)

    def cite(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """An event with the annotations of the recorded results that its text names: announced before the text's
        `output_text.done`, then in its part and its item, as the final answer of the JSON path has them (the
        round's own answer, which hooks judge, has none)."""
        index = payload.get("output_index")
        if not isinstance(index, int):
            return [payload]
        at = (index, payload.get("content_index"))
        if kind == "response.output_text.done" and isinstance(payload.get("text"), str):
            found = [
                a for _, runs in sorted(self.rounds.items()) for a in url_citations(payload["text"], _sources(runs))
            ]
            if not found:
                return [payload]
            self.annotated[at] = found
            where = {key: payload.get(key) for key in ("item_id", "output_index", "content_index")}
            added = [
                {"type": "response.output_text.annotation.added", **where, "annotation_index": n, "annotation": a}
                for n, a in enumerate(found)
            ]
            return [*added, payload]
        if kind == "response.content_part.done" and at in self.annotated:
            return [{**payload, "part": _annotated(payload.get("part"), self.annotated[at])}]
        if kind == "response.output_item.done" and any(key[0] == index for key in self.annotated):
            item = payload["item"]
            parts = item.get("content") if isinstance(item, dict) else None
            if isinstance(parts, list):
                parts = [_annotated(part, self.annotated.get((index, n), [])) for n, part in enumerate(parts)]
                item = self.shown[index] = {**item, "content": parts}
                return [{**payload, "item": item}]
        return [payload]

    def announce(self, search: NativeCall, round: int) -> Sequence[bytes] | None:
        """The reasoning item that led to the call (held with it, and shown with its record as in the JSON answer),
        then the call's `web_search_call` item added, `in_progress` and `searching`."""
        if not self.started:
            return None
        events: list[bytes] = []
        for reasoning in self.reasoning_before(search.call):
            events += sse.responses_item(self.emit, self.next_position, reasoning)
            self.recorded.append(reasoning)
        item = searching(search)
        position = self.next_position
        self.announced[id(search.call)] = len(self.recorded)
        self.recorded.append(item)
        at = {"item_id": item["id"], "output_index": position}
        events.append(self.emit("response.output_item.added", output_index=position, item=item))
        events.append(self.emit("response.web_search_call.in_progress", **at))
        events.append(self.emit("response.web_search_call.searching", **at))
        return events

    def record(self, run: NativeRun, round: int) -> Sequence[bytes] | None:
        """The call's search `completed` and its item done (all of its events if it was not announced)."""
        if not self.started:
            return None
        self.rounds.setdefault(round, []).append(run)
        item = web_search_call(run)
        slot = self.announced.pop(id(run.call), None)
        if slot is None:
            events: list[bytes] = []
            for whole in [*self.reasoning_before(run.call), item]:
                events += sse.responses_item(self.emit, self.next_position, whole)
                self.recorded.append(whole)
            return events
        self.recorded[slot] = item
        position = self.base + len(self.released) + slot
        return [
            self.emit("response.web_search_call.completed", item_id=item["id"], output_index=position),
            self.emit("response.output_item.done", output_index=position, item=item),
        ]

    def reasoning_before(self, call: Mapping[str, Any]) -> list[Any]:
        """The reasoning item that led to the app's `call` in this round (see reasoning.py), if it did not go out."""
        at = next((i for i, item in self.items.items() if is_call(item) and _is_same(item, call)), None)
        reasoning = None if at is None else leading(self.items, at)
        if reasoning is None or reasoning in self.released or reasoning in self.reasoned:
            return []
        self.reasoned.add(reasoning)
        return [self.items[reasoning]]


def _is_same(item: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    """Whether an item of the stream is the app's `call` (read from the round's answer): by `call_id`, else `id`."""
    if call.get("call_id"):
        return bool(item.get("call_id") == call.get("call_id"))
    return bool(call.get("id")) and item.get("id") == call.get("id")


def _sources(runs: list[NativeRun]) -> list[Any]:
    return [source for run in runs for source in run.cited_sources()]


def _annotated(part: Any, ours: list[dict[str, Any]]) -> Any:
    """An `output_text` part with our annotations in front of its own."""
    if not ours or not isinstance(part, dict):
        return part
    return {**part, "annotations": [*ours, *(part.get("annotations") or [])]}
