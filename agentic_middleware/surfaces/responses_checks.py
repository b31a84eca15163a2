"""The checks that a Responses stream's deltas agree with the items they fill: what the client shows as the deltas
come must be what the item, its `.done` events and the round's answer tell, or the round fails (the route's error
event, no call of it run), since the hooks judge the answer and the client acts on the events.

Its own module because these checks are a subject of their own, apart from the relay's placing and numbering of
events (responses_relay.py), which mixes them in.
"""

from __future__ import annotations

from typing import Any

from . import Spelled


class TextChecks:
    """The checks of `ResponsesRelay`, on the round's items (`items`, by the app's output_index; `done`, those whose
    `output_item.done` came), each message's parts' types (`parts`) and each part's text as its deltas spelled it
    (`texts`, until its item is done)."""

    __slots__ = ()

    items: dict[int, Any]
    done: set[int]
    parts: dict[int, list[Any]]
    texts: dict[tuple[int, int], Spelled]

    def check_part(self, index: Any, part: Any, delta: Any) -> None:
        """A message's text delta goes to the part its `content_index` names in the parts added so far, as the
        openai SDK's accumulator adds it (by position in the list it appends each `content_part.added` to, an
        `IndexError` or `AssertionError` there otherwise): one of no such `output_text` part cannot be read as the
        client reads it, and fails the round (the route's error event, no call of it run)."""
        item = self.items.get(index) if type(index) is int else None
        if not isinstance(item, dict) or item.get("type") != "message":
            return  # the SDK adds it to nothing
        parts = self.parts.get(index, [])
        if type(part) is not int or not 0 <= part < len(parts) or parts[part] != "output_text" or index in self.done:
            raise ValueError(f"a text delta of part {part!r} of output item {index}, which has no such output_text")
        if type(delta) is not str:  # the SDK adds it to the part's text
            raise ValueError(f"a text delta of output item {index} whose delta is {type(delta).__name__}")
        self.texts.setdefault((index, part), Spelled()).add(delta)

    def check_done(self, index: Any, part: Any, text: Any) -> None:
        """A part's `output_text.done` gives its whole text (the openai SDK's `ResponseTextDoneEvent`, what a client
        that prints text at its end shows): the one its deltas spelled, or the round fails; no delta comes after it."""
        kept = self.texts.get((index, part)) if type(index) is int and type(part) is int else None
        if kept is None or type(text) is not str:
            return  # a part with no deltas, or one of no message: the item's text is what is told (`check_texts`)
        shown = str(kept)
        if shown and text != shown:
            raise ValueError(f"the text of part {part} of output item {index} differs from its deltas'")
        parts = self.parts[index]
        parts[part] = "output_text done"  # a delta after it reaches no text the SDK keeps (`check_part`)

    def check_texts(self, index: Any, item: Any) -> None:
        """The item told as the answer has it (its `output_item.done`, else the terminal's): each of its parts'
        text the one its deltas spelled, the text the client showed as it came, or the round fails. Its kept deltas
        are let go."""
        if type(index) is not int:
            return
        content = item.get("content") if isinstance(item, dict) else None
        for part in [key[1] for key in self.texts if key[0] == index]:
            shown = str(self.texts.pop((index, part)))
            if not shown:
                continue  # the client was shown no text of it but the item's
            told = content[part] if isinstance(content, list) and part < len(content) else None
            if not isinstance(told, dict) or told.get("text") != shown:
                raise ValueError(f"the text of part {part} of output item {index} differs from its deltas'")

    def check_told_alike(self, output: Any) -> None:
        """The round's answer is its terminal event's `output` (`body`), but the client acts on each item's
        `output_item.done` (Codex records its messages and runs its calls from them, the SDKs give it as the item's
        event): an item done in the stream must be read alike at its place there, or the hooks would judge what the
        client never got. Raises (the round cannot be read: the route's error event, no call of it run) when not.
        What a client and a hook act on is compared (`_reading`), not every field, which servers may fill
        differently in the two places."""
        if not isinstance(output, list) or not output:
            return  # `body` gives the items as done
        for index in self.done:
            if index >= len(output) or _reading(output[index]) != _reading(self.items[index]):
                raise ValueError(f"the terminal event's output differs from output item {index} as it was done")


_READ = ("type", "id", "call_id", "name", "arguments", "input", "server_label")  # what a call is read by


def _reading(item: Any) -> Any:
    """What a client and a hook act on of an output item: its kind and ids, a call's name and arguments, a
    message's parts' text (`check_told_alike`)."""
    if not isinstance(item, dict):
        return item
    content = item.get("content") if item.get("type") == "message" else None
    parts = (
        [(p.get("type"), p.get("text"), p.get("refusal")) if isinstance(p, dict) else p for p in content]
        if isinstance(content, list)
        else content
    )
    return [item.get(key) for key in _READ], parts
