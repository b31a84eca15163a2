"""What a guardrail's `apply_guardrail` is given of a request, and how what it returns is written back.

LiteLLM's proxy gives a guardrail every text of the request, on every route, unless the guardrail (or LiteLLM's
global setting) says to skip system or tool messages:

- `/v1/messages`: the top-level `system` (a string, or its text blocks) first, then each message's string content
  and text blocks, and each `tool_result`'s content (a string, or its text blocks);
- `/v1/chat/completions`: every message's string content and text parts, whatever its role;
- `/v1/responses`: `instructions` first, then a string input, input messages' contents and text parts, and
  tool outputs (`function_call_output` and its kin) that are text.

Beyond LiteLLM, the words the model reads outside a `text` field (documents, search results, refusals, reasoning
summaries, MCP outputs, native web-search records and citations: guardrail_native.py) are texts too, and
`tool_calls` and `images` are given as LiteLLM gives them (on Responses too, where it gives none): a word a
guardrail blocks must not reach the model where the guardrail never looked.

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

import orjson

from .guardrail_native import block_slots, citation_slots, web_search_call_slots
from .guardrail_native import string_slot as _string_slot
from .guardrail_native import unreadable as _unreadable
from .surfaces.responses import input_items

# The request fields that hold texts, on any route: copied before a guardrail's texts are written into them.
_TEXT_FIELDS = ("system", "messages", "input", "instructions")

Slot = tuple[Any, Any]  # (container, key): where one text stands (a native record's: guardrail_native.py)


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
        self.tool_calls: list[Any] = [_as_tool_call(call, api_surface) for call in _calls(request_data, api_surface)]
        self.images: list[str] = list(_images(request_data, api_surface, skip_tool))
        # What it was given, kept apart: a guardrail may edit the lists it gets in place and return them.
        self.given_texts = list(self.texts)
        self.given_calls = copy.deepcopy(self.tool_calls)
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

    def write_tool_calls(self, returned: list[Any]) -> str | None:
        """The tool calls a guardrail returned, each where it came from (on copies); a problem, else None."""
        if len(returned) != len(self.given_calls):
            return f"returned {len(returned)} tool calls for the {len(self.given_calls)} it was given"
        data = self.request_data
        if isinstance(data.get("messages"), list):
            data["messages"] = copy.deepcopy(data["messages"])
        elif self.api_surface == "responses" and isinstance(data.get("input"), list):
            data["input"] = copy.deepcopy(data["input"])
        for (holder, key), call in zip(_call_slots(data, self.api_surface), returned, strict=True):
            if self.api_surface == "chat_completions":
                legacy = key == "function_call"
                holder[key] = call.get("function") if legacy and isinstance(call, dict) else call
                continue
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            item = holder[key]
            if self.api_surface == "responses":
                if not isinstance(arguments, str):
                    return "returned a tool call whose arguments are not a string"
                item[_RESPONSES_CALLS[item["type"]]] = arguments
            else:
                try:
                    parsed = orjson.loads(arguments) if isinstance(arguments, str) else arguments
                except orjson.JSONDecodeError:
                    parsed = None
                if not isinstance(parsed, dict):
                    return "returned a tool call whose arguments are not a JSON object"
                item["input"] = parsed
            if isinstance(name, str):
                item["name"] = name
        return None


_END = object()


def _call_slots(data: dict[str, Any], api_surface: str) -> Iterator[Slot]:
    """Where each tool call of the request's history stands, as LiteLLM's proxy gives them to a guardrail: Chat's
    assistant `tool_calls`, Messages' `tool_use` blocks; and on Responses (where LiteLLM gives none, so that a
    guardrail reading tool calls is walked around there) `function_call`, `custom_tool_call` and `mcp_call` items."""
    if api_surface == "responses":
        items = data.get("input")
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and item.get("type") in _RESPONSES_CALLS:
                yield items, index
        return
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        if api_surface == "anthropic_messages":
            content = message.get("content")
            for index, block in enumerate(content if isinstance(content, list) else ()):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    yield content, index
            continue
        calls = message.get("tool_calls")
        for index, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):
                yield calls, index
        if isinstance(message.get("function_call"), dict):  # the deprecated single call, which LiteLLM skips
            yield message, "function_call"


# A Responses call item's field that holds what it was called with.
_RESPONSES_CALLS = {"function_call": "arguments", "custom_tool_call": "input", "mcp_call": "arguments"}


def _images(data: dict[str, Any], api_surface: str, skip_tool: bool) -> Iterator[str]:
    """The images of the request's messages, as LiteLLM's proxy gives them to a guardrail (read only): an image
    block's URL or its base64 data as a data URI (Messages), an `image_url` part's URL (Chat), and an
    `input_image`'s URL (Responses, where LiteLLM gives none)."""
    messages = data.get("input" if api_surface == "responses" else "messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if (skip_tool and _role(message, api_surface) == "tool") or not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image" and isinstance(source := part.get("source"), dict):
                url, data_ = source.get("url"), source.get("data")
                media = source.get("media_type")
                if isinstance(url, str) and url:
                    yield url
                elif isinstance(data_, str) and data_:
                    yield f"data:{media};base64,{data_}" if isinstance(media, str) and media else data_
            elif kind in ("image_url", "input_image"):
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                if isinstance(url, str) and url:
                    yield url


def _calls(data: dict[str, Any], api_surface: str) -> Iterator[Any]:
    for holder, key in _call_slots(data, api_surface):
        yield holder[key]


def _as_tool_call(call: dict[str, Any], api_surface: str) -> dict[str, Any]:
    """One call as a guardrail reads it: an OpenAI tool call (a copy: the client's body is not changed)."""
    if api_surface == "chat_completions":
        if "function" not in call and "name" in call:  # a deprecated `function_call`
            return {"id": None, "type": "function", "function": copy.deepcopy(call)}
        return copy.deepcopy(call)
    if api_surface == "responses":
        arguments = call.get(_RESPONSES_CALLS[call["type"]])
        call_id = call.get("call_id", call.get("id"))
    else:
        arguments, call_id = orjson.dumps(call.get("input", {})).decode(), call.get("id")
    return {"id": call_id, "type": "function", "function": {"name": call.get("name"), "arguments": arguments}}


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
            raise _unreadable(f"a message that is {type(message).__name__}")
        role = _role(message, api_surface)
        skipped = (skip_system and role == "system") or (skip_tool and role == "tool")
        if skipped and api_surface != "anthropic_messages":  # there tool results are blocks, system is top-level
            continue
        if api_surface == "chat_completions":  # an assistant's refusal, as the model reads it (LiteLLM gives none)
            yield from _string_slot(message, "refusal")
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
                yield from _part_slots(block)
                yield from block_slots(block, skip_tool)  # a native record's words (guardrail_native.py)


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
            yield from _part_slots(part)
    elif value is not None:
        raise _unreadable(f"{key} that is {type(value).__name__}")


def _part_slots(part: dict[str, Any]) -> Iterator[Slot]:
    """A content part's texts: its `text`, and the texts the model reads in parts that keep them elsewhere.

    LiteLLM's proxy gives a guardrail only a part's `text` (and a Responses refusal's `refusal`); the model also
    reads a refusal part's words, a `document`'s title, context and text source (`data`, or a `content` source's
    texts) and a `search_result`'s title and text blocks, so those are given too: else a word a guardrail blocks
    would reach the model in a document. A nested `tool_result` (which no API accepts) is read as one."""
    kind = part.get("type")
    yield from _string_slot(part, "refusal" if kind == "refusal" else "text")
    if kind in ("document", "search_result"):
        yield from _string_slot(part, "title")
        if kind == "document":
            yield from _string_slot(part, "context")
            source = part.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                yield from _string_slot(source, "data")
            elif isinstance(source, dict) and source.get("type") == "content":
                yield from _content_slots(source, "content")
        else:
            yield from _content_slots(part, "content")
    elif kind == "tool_result":
        yield from _content_slots(part, "content")
    yield from citation_slots(part)


def _responses_slots(data: dict[str, Any], skip_system: bool, skip_tool: bool) -> Iterator[Slot]:
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _unreadable(f"instructions that are {type(instructions).__name__}")
    if instructions is not None and not skip_system:
        yield data, "instructions"
    items = data.get("input")
    if isinstance(items, str):
        yield data, "input"
        return
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            raise _unreadable(f"an input item that is {type(item).__name__}")
        role = _role(item, "responses")
        if (skip_system and role == "system") or (skip_tool and role == "tool"):
            continue
        if item.get("type") == "reasoning":  # its summary is words the app may show the model again
            yield from _content_slots(item, "summary")
        if item.get("type") == "web_search_call":  # a native search's record (guardrail_native.py)
            yield from web_search_call_slots(item, skip_tool)
            continue
        if item.get("type") == "mcp_call":  # a call and its output in one item: the model reads the output
            if not skip_tool:
                yield from _string_slot(item, "output")
            continue
        yield from _content_slots(item, "output" if role == "tool" else "content")
