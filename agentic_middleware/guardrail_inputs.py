"""What a guardrail's `apply_guardrail` is given of a request, and how what it returns is written back.

LiteLLM's proxy gives a guardrail every text of the request, on every route, unless the guardrail (or LiteLLM's
global setting) says to skip system or tool messages:

- `/v1/messages`: the top-level `system` (a string, or its text blocks) first, then each message's string content
  and text blocks, and each `tool_result`'s content (a string, or its text blocks);
- `/v1/chat/completions`: every message's string content and text parts, whatever its role;
- `/v1/responses`: `instructions` first, then a string input, input messages' contents and text parts, and
  tool outputs (`function_call_output` and its kin) that are text.

Each text has a slot (its container and key), so the texts a guardrail returns are written where they came from.
Its `structured_messages` are the request's messages (on Responses, its input items; on Messages the `system`
prompt leads them as a `{"role": "system"}` entry), less those the skip settings leave out; what it returns is
merged back around them.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from typing import Any

from .errors import RequestRefused
from .surfaces.responses import input_items

# The request fields that hold texts, on any route: copied before a guardrail's texts are written into them.
_TEXT_FIELDS = ("system", "messages", "input", "instructions")

Slot = tuple[Any, Any]  # (container, key): where one text stands


def skips(guardrail: object) -> tuple[bool, bool]:
    """(skip system, skip tool), read as LiteLLM reads them: the guardrail's own `skip_system_message_in_guardrail`
    / `skip_tool_message_in_guardrail` when set (LiteLLM's proxy copies them there from the guardrail's
    `litellm_params`), else LiteLLM's global setting of the same name when LiteLLM is loaded, else False."""
    litellm = sys.modules.get("litellm")  # never imported here: its global is set only where it runs
    flags = []
    for name in ("skip_system_message_in_guardrail", "skip_tool_message_in_guardrail"):
        own = getattr(guardrail, name, None)
        flags.append(bool(own) if own is not None else bool(getattr(litellm, name, False)))
    return flags[0], flags[1]


class GuardrailView:
    """One guardrail's view of one request: its texts with their slots, and its structured messages."""

    def __init__(self, request_data: dict[str, Any], api_surface: str, skip_system: bool, skip_tool: bool) -> None:
        self.request_data = request_data
        self.api_surface = api_surface
        self.skip_system = skip_system
        self.skip_tool = skip_tool
        self.system_entry: dict[str, Any] | None = None  # on Messages: `system`, as the entry leading the messages
        self.slots = list(_slots(request_data, api_surface, skip_system, skip_tool))
        self.texts: list[str] = [holder[key] for holder, key in self.slots]
        self.all_messages: list[Any] = self._all_messages()
        self.in_scope = [index for index, item in enumerate(self.all_messages) if self._in_scope(item)]
        self.messages: list[Any] = (
            self.all_messages
            if len(self.in_scope) == len(self.all_messages)
            else [self.all_messages[index] for index in self.in_scope]
        )

    def _all_messages(self) -> list[Any]:
        """The messages a guardrail reads, the skipped ones included: on Messages, `system` leads as an entry."""
        if self.api_surface == "responses":
            items: list[Any] = input_items(self.request_data)
            return items
        messages = self.request_data.get("messages")
        messages = messages if isinstance(messages, list) else []
        system = self.request_data.get("system")
        if self.api_surface == "anthropic_messages" and isinstance(system, str | list) and not self.skip_system:
            self.system_entry = {"role": "system", "content": system}
            return [self.system_entry, *messages]
        return messages

    def _in_scope(self, item: Any) -> bool:
        role = _role(item, self.api_surface)
        if self.skip_system and role == "system" and self.api_surface != "anthropic_messages":
            return False  # on Messages only the top-level prompt is skipped: a system entry in messages is the client's
        return not (self.skip_tool and role == "tool")

    def write_messages(self, returned: list[Any]) -> None:
        """A guardrail's returned structured messages, merged around the ones it was not given, written back."""
        merged = returned if self.messages is self.all_messages else self._merged(returned)
        if self.api_surface == "responses":
            self.request_data["input"] = list(merged)
            return
        if self.api_surface != "anthropic_messages":
            self.request_data["messages"] = list(merged)
            return
        leading = 0
        while leading < len(merged) and isinstance(merged[leading], dict) and merged[leading].get("role") == "system":
            leading += 1
        if leading:
            contents = [merged[index].get("content") for index in range(leading)]
            self.request_data["system"] = contents[0] if leading == 1 else _as_blocks(contents)
        elif self.system_entry is not None:  # the guardrail dropped the system prompt it was given
            self.request_data.pop("system", None)
        self.request_data["messages"] = list(merged[leading:])

    def write_system_edit(self) -> None:
        """A system entry the guardrail edited in place (its list returned as given) reaches `system`."""
        if self.system_entry is not None and self.system_entry.get("content") is not self.request_data.get("system"):
            self.request_data["system"] = self.system_entry.get("content")

    def _merged(self, returned: list[Any]) -> list[Any]:
        """The messages it was not given keep their places; the returned ones fill the others, in order."""
        given = iter(returned)
        scope = set(self.in_scope)
        merged = []
        for index, item in enumerate(self.all_messages):
            if index not in scope:
                merged.append(item)
            elif (next_item := next(given, _END)) is not _END:
                merged.append(next_item)
        merged.extend(given)
        return merged

    def write_texts(self, returned: list[str]) -> None:
        """Each returned text where its original came from (on copies: the client's body stays as it was)."""
        data = self.request_data
        for name in _TEXT_FIELDS:
            if isinstance(data.get(name), list | dict):
                data[name] = copy.deepcopy(data[name])
        slots = list(_slots(data, self.api_surface, self.skip_system, self.skip_tool))
        for (holder, key), text in zip(slots, returned, strict=True):
            holder[key] = text


_END = object()


def _as_blocks(contents: list[Any]) -> list[Any]:
    """Several system entries as one `system` of text blocks."""
    blocks: list[Any] = []
    for content in contents:
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
    return blocks


def _role(item: Any, api_surface: str) -> str:
    """A message's role as LiteLLM scopes it: a Responses tool output counts as "tool"."""
    if not isinstance(item, dict):
        return ""
    if api_surface == "responses" and str(item.get("type", "")).endswith("_call_output"):
        return "tool"
    role = item.get("role")
    return role.lower() if isinstance(role, str) else ""


def _slots(data: dict[str, Any], api_surface: str, skip_system: bool, skip_tool: bool) -> Iterator[Slot]:
    if api_surface == "responses":
        yield from _responses_slots(data, skip_system, skip_tool)
        return
    if api_surface == "anthropic_messages" and not skip_system:
        yield from _content_slots(data, "system")
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        role = _role(message, api_surface)
        skipped = (skip_system and role == "system") or (skip_tool and role == "tool")
        if skipped and api_surface != "anthropic_messages":  # there tool results are blocks, system is top-level
            continue
        content = message.get("content")
        if not isinstance(content, list):
            yield from _content_slots(message, "content")
            continue
        for block in content:
            if not isinstance(block, dict):
                raise _unreadable(f"a part of content that is {type(block).__name__}")
            if block.get("type") == "tool_result" and api_surface == "anthropic_messages":
                if not skip_tool:
                    yield from _content_slots(block, "content")
            else:
                yield from _text_slot(block)


def _content_slots(holder: dict[str, Any], key: str) -> Iterator[Slot]:
    """A content field's texts: the field itself when a string, else its parts' `text` strings.

    A field or part of a shape no guardrail can read (a content that is an object, a part that is a string, a
    `text` that is not a string) is refused, not passed on unjudged: a lenient app might read it."""
    value = holder.get(key)
    if isinstance(value, str):
        yield holder, key
    elif isinstance(value, list):
        for part in value:
            if not isinstance(part, dict):
                raise _unreadable(f"a part of {key} that is {type(part).__name__}")
            yield from _text_slot(part)
    elif value is not None:
        raise _unreadable(f"{key} that is {type(value).__name__}")


def _text_slot(part: dict[str, Any]) -> Iterator[Slot]:
    text = part.get("text")
    if isinstance(text, str):
        yield part, "text"
    elif text is not None:
        raise _unreadable(f"a text that is {type(text).__name__}")


def _unreadable(what: str) -> RequestRefused:
    return RequestRefused(f"the request holds {what}: the guardrails cannot read it")


def _responses_slots(data: dict[str, Any], skip_system: bool, skip_tool: bool) -> Iterator[Slot]:
    if isinstance(data.get("instructions"), str) and not skip_system:
        yield data, "instructions"
    items = data.get("input")
    if isinstance(items, str):
        yield data, "input"
        return
    for item in items if isinstance(items, list) else ():
        role = _role(item, "responses")
        if (skip_system and role == "system") or (skip_tool and role == "tool") or not isinstance(item, dict):
            continue
        yield from _content_slots(item, "output" if role == "tool" else "content")
