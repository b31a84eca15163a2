"""What a guardrail's `apply_guardrail` is given of a request, and how what it returns is written back.

LiteLLM's proxy gives a guardrail every text of the request, on every route, unless the guardrail (or LiteLLM's
global setting) says to skip system or tool messages:

- `/v1/messages`: the top-level `system` (a string, or its text blocks) first, then each message's string content
  and text blocks, and each `tool_result`'s content (a string, or its text blocks);
- `/v1/chat/completions`: every message's string content and text parts, whatever its role;
- `/v1/responses`: `instructions` first, then a string input, input messages' contents and text parts, and
  tool outputs (`function_call_output` and its kin) that are text.

Beyond LiteLLM, the words the model reads outside a `text` field (documents, search results, refusals, reasoning
summaries, annotations, native web-search records and citations: guardrail_native.py; the records of other
server and client tools, MCP, code execution, web fetch, file search, shells: guardrail_records.py; what a media
part, a Chat tool call or a Chat audio holds that is not what the API puts there: guardrail_opaque.py) are texts too,
and a block, part or item of a type no reader knows is given whole (guardrail_walk.py); where they stand is
guardrail_texts.py. `tool_calls` and `images` are given as LiteLLM gives them (on Responses too, where it gives
none): a word a guardrail blocks must not reach the model where the guardrail never looked.

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

from .guardrail_texts import TOOL_OUTPUTS, extra_slots
from .guardrail_texts import role as _role
from .guardrail_texts import slots as _slots
from .guardrail_values import is_file_image
from .guardrail_walk import KeyOf, Slot, check_depth, refuse_merged_keys, rename_keys, unreadable
from .surfaces.responses import input_items

# The request fields that hold texts, on any route: copied before a guardrail's texts are written into them.
_TEXT_FIELDS = ("system", "messages", "input", "instructions")
# The request fields that hold texts the model reads besides the messages (guardrail_texts.extra_slots).
_SCHEMA_FIELDS = ("response_format", "text", "prompt", "output_format", "output_config")


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
        for name in _TEXT_FIELDS + _SCHEMA_FIELDS:  # before any walk or copy: a deep one would exhaust the stack
            check_depth(request_data.get(name))
        self.slots = [
            *_slots(request_data, api_surface, skip_system, skip_tool),
            *extra_slots(request_data, api_surface),
        ]
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
        for name in _TEXT_FIELDS + _SCHEMA_FIELDS:
            if isinstance(data.get(name), list | dict):
                data[name] = copy.deepcopy(data[name])
        slots = [
            *_slots(data, self.api_surface, self.skip_system, self.skip_tool),
            *extra_slots(data, self.api_surface),
        ]
        renamed: dict[int, KeyOf] = {}
        for (holder, key), text in zip(slots, returned, strict=True):
            if key == "arguments" and isinstance(holder, dict):  # an mcp_approval_request's, JSON as a call's are
                refuse_merged_keys(holder[key], text)
            holder[key] = text
            if isinstance(holder, KeyOf):
                renamed[id(holder)] = holder
        rename_keys(renamed.values())  # after every value is written under its key's old name

    def write_tool_calls(self, returned: list[Any]) -> str | None:
        """The tool calls a guardrail returned, each where it came from (on copies); a problem, else None."""
        if len(returned) != len(self.given_calls):
            return f"returned {len(returned)} tool calls for the {len(self.given_calls)} it was given"
        data = self.request_data
        if isinstance(data.get("messages"), list):
            data["messages"] = copy.deepcopy(data["messages"])
        elif self.api_surface == "responses" and isinstance(data.get("input"), list):
            data["input"] = copy.deepcopy(data["input"])
        pairs = zip(_call_slots(data, self.api_surface), returned, self.given_calls, strict=True)
        for (holder, key), call, given in pairs:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            refuse_merged_keys(_called_with(given), _called_with(call))  # its edit: no two keys made one
            if self.api_surface == "chat_completions":  # over the masks `write_texts` wrote in the call (its id)
                problem = _chat_call_problem(call, given)
                if problem is not None:
                    return problem
                legacy = key == "function_call"
                if legacy and isinstance(call, dict):
                    holder[key] = _edited(holder[key], function, given.get("function"))
                else:
                    holder[key] = _edited(holder[key], call, given)
                continue
            name = function.get("name") if isinstance(function, dict) else None
            if not _kept_shape(name, given["function"]["name"]):
                return "returned a tool call whose name is not a string"
            item = holder[key]
            if arguments == given["function"]["arguments"]:
                pass  # as it was given (the client's, a null too): the item keeps its own
            elif self.api_surface == "responses":
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

# A Chat call's tool, by its field: the field of the tool that holds what it was called with (a string), as a
# refusal names it.
_CHAT_CALLED_WITH = {"function": ("arguments", "arguments are"), "custom": ("input", "input is")}


def _chat_call_problem(call: Any, given: dict[str, Any]) -> str | None:
    """What makes a Chat tool call a guardrail returned (`call`, where it was given `given`) one no app reads: a
    call that is not an object, its `function` (or `custom` tool) not an object, arguments (a custom tool's input)
    that are not a string, or left out where it was given one. Refused, as on Responses, rather than written into
    the request for the app to fail on, or to read as it may (an object of arguments no guardrail judged as JSON).
    A null (or absent) tool or arguments it returns as it was given them is the client's, not its fault: kept as
    the client sent it (the reader took it for none), not blamed on the guardrail."""
    if not isinstance(call, dict):
        return f"returned a tool call that is {type(call).__name__}, not an object"
    for field in ("id", "type"):
        if not _kept_shape(call.get(field), given.get(field)):
            return f"returned a tool call whose {field} is not a string"
    for tool, (field, named) in _CHAT_CALLED_WITH.items():
        inner, was = call.get(tool), given.get(tool)
        if inner is None and was is None:
            continue  # absent, or null as the client sent it
        if not isinstance(inner, dict):
            return f"returned a tool call whose {tool} is not an object"
        before = was if isinstance(was, dict) else {}
        if not _kept_shape(inner.get("name"), before.get("name")):
            return "returned a tool call whose name is not a string"
        if not _kept_shape(inner.get(field), before.get(field)):
            return f"returned a tool call whose {named} not a string"
    return None


def _kept_shape(value: Any, given: Any) -> bool:
    """Whether a tool call's field a guardrail returned (its id, type, name, arguments) may be written into the
    request: a string, or of the shape the client sent it in where that was none (a null or an absent field, an
    object a client made up, which the masks of its texts were written into). A string it turned into anything
    else (an object, a number, a list, a null, left out) is refused, on every route: no app reads such a call."""
    return isinstance(value, str) or (not isinstance(given, str) and type(value) is type(given))


def _edited(current: Any, returned: Any, given: Any) -> Any:
    """A Chat tool call as a guardrail returned it (`returned`, where it was given `given`), written over the call
    as the masks of its texts left it (`current`: a call's id, type and made-up fields are texts too): what the
    guardrail returned as it was given keeps those masks, what it changed is its edit. Else a guardrail masking
    texts and arguments would write the call it was given back over the mask of the call's id."""
    if current == given or not (isinstance(current, dict) and isinstance(returned, dict) and isinstance(given, dict)):
        return returned if current == given or returned != given else current
    if returned == given:
        return current
    edited = {  # in the order of the call as masked; a key a text's mask renamed keeps its new name
        key: _edited(value, returned[key], given[key]) if key in given else value
        for key, value in current.items()
        if key not in given or key in returned
    }
    edited.update((key, value) for key, value in returned.items() if key not in given and key not in edited)
    return edited


def _called_with(call: Any) -> Any:
    """What a tool call, in the OpenAI shape a guardrail is given it (`_as_tool_call`), was called with: its
    `function.arguments`, or a Chat custom call's `custom.input` (on Responses a `custom_tool_call`'s `input` is
    given as `function.arguments`); else None.

    A custom tool's input is free text, but text that is JSON may be read as JSON (by the tool that takes it, or an
    app that maps the call onto a function call), keeping one of two values a mask named alike: so an edit of it
    merging two keys is refused as for `arguments` (`refuse_merged_keys`; text that is not JSON has no keys to merge),
    on Chat as the same input already was on Responses."""
    if not isinstance(call, dict):
        return None
    function, custom = call.get("function"), call.get("custom")
    if isinstance(function, dict) and "arguments" in function:
        return function["arguments"]
    return custom.get("input") if isinstance(custom, dict) else None


def _call_slots(data: dict[str, Any], api_surface: str) -> Iterator[Slot]:
    """Where each tool call of the request's history stands, as LiteLLM's proxy gives them to a guardrail: Chat's
    assistant `tool_calls`, Messages' `tool_use` blocks; and on Responses (where LiteLLM gives none, so that a
    guardrail reading tool calls is walked around there) `function_call`, `custom_tool_call` and `mcp_call` items."""
    if api_surface == "responses":
        items = data.get("input")
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and item.get("type") in _RESPONSES_CALLS:
                field = _RESPONSES_CALLS[item["type"]]
                value = item.get(field)
                if value is not None and not isinstance(value, str):  # the API's own form, as for Chat
                    raise unreadable(f"a {item['type']}'s {field} that is {type(value).__name__}, not a string")
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
                    if block.get("input") is not None and not isinstance(block["input"], dict):
                        raise unreadable(f"a tool_use input that is {type(block['input']).__name__}, not an object")
                    yield content, index
            continue
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise unreadable(f"tool_calls that are {type(calls).__name__}")
        for index, call in enumerate(calls or ()):
            if not isinstance(call, dict):
                raise unreadable(f"a tool call that is {type(call).__name__}")
            _chat_arguments(call.get("function"))
            custom = call.get("custom")
            if custom is not None and not (isinstance(custom, dict) and isinstance(custom.get("input", ""), str)):
                raise unreadable("a custom tool call whose input is not a string")
            yield calls, index
        legacy = message.get("function_call")  # the deprecated single call, which LiteLLM skips
        if legacy is not None and not isinstance(legacy, dict):
            raise unreadable(f"a function_call that is {type(legacy).__name__}")
        if legacy is not None:
            _chat_arguments(legacy)
            yield message, "function_call"


def _chat_arguments(function: Any) -> None:
    """A Chat call's `arguments` must be a string (the API's own form, and the only one LiteLLM's content filter
    reads): an object or any other value would reach a lenient app unjudged by such a guardrail, so it is refused."""
    if function is not None and not isinstance(function, dict):
        raise unreadable(f"a tool call's function that is {type(function).__name__}")
    arguments = function.get("arguments") if function is not None else None
    if arguments is not None and not isinstance(arguments, str):
        raise unreadable(f"a tool call's arguments that are {type(arguments).__name__}, not a string")


# A Responses call item's field that holds what it was called with.
_RESPONSES_CALLS = {"function_call": "arguments", "custom_tool_call": "input", "mcp_call": "arguments"}


def _images(data: dict[str, Any], api_surface: str, skip_tool: bool) -> Iterator[str]:
    """Every image of the request's messages the model will see, in document order, as LiteLLM's proxy gives a
    message's images to a guardrail (read only): an image block's URL or its base64 data as a data URI (Messages),
    an `image_url` part's URL (Chat), an `input_image`'s URL (Responses, where LiteLLM gives none). LiteLLM reads a
    message's own parts only; the images nested in what the model reads are given too, each at its place among them:
    a `tool_result`'s (and an `mcp_tool_result`'s) content and a document's content source (Messages), a tool
    output's parts, a computer call's screenshot, an image generation's result and a code interpreter's image
    outputs (Responses). A guardrail that
    judges images sees them all, as its texts are all the words. With `skip_tool_message_in_guardrail` a tool's
    images are left out as its texts are: Chat's tool messages, Messages' tool results, Responses' tool outputs."""
    if api_surface == "responses":
        items = data.get("input")
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict) or (skip_tool and _role(item, api_surface) == "tool"):
                continue
            kind = item.get("type")
            if kind in (None, "message"):
                yield from _part_images(item.get("content"), False)
            elif kind in TOOL_OUTPUTS:
                output = item.get("output")
                yield from _part_images(output if isinstance(output, list) else [output], False)
            elif kind == "image_generation_call" and isinstance(result := item.get("result"), str) and result:
                yield result
            elif kind == "code_interpreter_call" and isinstance(outputs := item.get("outputs"), list):
                urls = (
                    output.get("url")
                    for output in outputs
                    if isinstance(output, dict) and output.get("type") == "image"
                )
                yield from (url for url in urls if isinstance(url, str) and url)
        return
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and not (skip_tool and _role(message, api_surface) == "tool"):
            yield from _part_images(message.get("content"), skip_tool and api_surface == "anthropic_messages")


def _part_images(content: Any, skip_tool: bool) -> Iterator[str]:
    """The images of a list of parts, nested ones at their place; `skip_tool`: a Messages tool result's left out."""
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image" and isinstance(source := part.get("source"), dict):
            url, data_ = source.get("url"), source.get("data")
            media = source.get("media_type")
            if isinstance(url, str) and url:
                yield url
            elif isinstance(data_, str) and data_:
                yield f"data:{media};base64,{data_}" if isinstance(media, str) and media else data_
        elif kind in ("image_url", "input_image", "computer_screenshot"):
            for url in (part.get("image_url"), part.get("url")):  # LiteLLM reads `url` where `image_url` is empty
                url = url.get("url") if isinstance(url, dict) else url
                if isinstance(url, str) and url:
                    yield url
        elif kind in ("file", "input_file"):  # LiteLLM reads a file's bytes at the part's level or in its `file`
            file = part.get("file")
            for data_ in (part.get("file_data"), file.get("file_data") if isinstance(file, dict) else file):
                if isinstance(data_, str) and is_file_image(data_):
                    yield data_
        elif kind in ("tool_result", "mcp_tool_result") and not skip_tool:
            yield from _part_images(part.get("content"), False)
        elif kind == "document" and isinstance(source := part.get("source"), dict) and source.get("type") == "content":
            yield from _part_images(source.get("content"), False)


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
