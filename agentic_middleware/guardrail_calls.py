"""The tool calls a guardrail is given of a request, as LiteLLM's proxy gives them, and how its edits of them are
written back.

LiteLLM gives a guardrail a request's tool calls in OpenAI's shape (`tool_calls`): Chat's assistant `tool_calls`,
Messages' `tool_use` blocks; here Responses' `function_call`, `custom_tool_call` and `mcp_call` items too, where
LiteLLM gives none, so that a guardrail reading tool calls is not walked around there. A call of a shape no
guardrail reads (arguments that are no string, an input that is no object) is refused rather than given; an edit of
one is written back where it came from, refused where it leaves a call no app reads or merges two keys of its
arguments into one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson

from .guardrail_walk import Slot, refuse_escaped_words, refuse_merged_keys, unreadable


def given_calls(data: dict[str, Any], api_surface: str) -> list[Any]:
    """The request's tool calls as a guardrail is given them (copies: the client's body is not changed). Arguments
    spelling letters as JSON escapes are refused (`refuse_escaped_words`): the app decodes them for the model."""
    calls = [_as_tool_call(holder[key], api_surface) for holder, key in _call_slots(data, api_surface)]
    for call in calls:
        refuse_escaped_words(_called_with(call), "a tool call's arguments")
    return calls


def write_calls(data: dict[str, Any], api_surface: str, returned: list[Any], given: list[Any]) -> str | None:
    """The tool calls a guardrail returned (`given` what it was given), each where it came from in `data` (on
    copies of its messages or input); a problem, else None."""
    if len(returned) != len(given):
        return f"returned {len(returned)} tool calls for the {len(given)} it was given"
    if isinstance(data.get("messages"), list):
        data["messages"] = copy.deepcopy(data["messages"])
    elif api_surface == "responses" and isinstance(data.get("input"), list):
        data["input"] = copy.deepcopy(data["input"])
    pairs = zip(_call_slots(data, api_surface), returned, given, strict=True)
    for (holder, key), call, was in pairs:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        refuse_merged_keys(_called_with(was), _called_with(call))  # its edit: no two keys made one
        if api_surface == "chat_completions":  # over the masks `write_texts` wrote in the call (its id)
            problem = _chat_call_problem(call, was)
            if problem is not None:
                return problem
            legacy = key == "function_call"
            if legacy and isinstance(call, dict):
                holder[key] = _edited(holder[key], function, was.get("function"))
            else:
                holder[key] = _edited(holder[key], call, was)
            continue
        name = function.get("name") if isinstance(function, dict) else None
        if not _kept_shape(name, was["function"]["name"]):
            return "returned a tool call whose name is not a string"
        item = holder[key]
        if arguments == was["function"]["arguments"]:
            pass  # as it was given (the client's, a null too): the item keeps its own
        elif api_surface == "responses":
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
