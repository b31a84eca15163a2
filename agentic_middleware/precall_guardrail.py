"""One guardrail's `apply_guardrail` on a request, called as LiteLLM's proxy calls it, and what it returns applied.

The pre-call lifecycle (precall.py) decides which guardrails judge and in what order; this is one call of one: the
inputs LiteLLM's unified guardrail path gives it (the texts, structured messages, tool calls and images of
guardrail_inputs.py's view), the request's tools as OpenAI function tools on every route (as LiteLLM gives them),
and its answer written back: its texts or messages into the request, its tools converted back to the route's shape
with the request's own declarations kept where it left them as they were. Guardrails that judge in the proxy's own
hooks instead are precall_proxy.py's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .errors import HookError
from .guardrail_inputs import GuardrailView, skips
from .hooks import GUARDRAIL
from .precall_proxy import called
from .surfaces import canonical

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging, BoundHook


async def call_guardrail(
    hook: BoundHook,
    request_data: dict[str, Any],
    api_surface: str,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
) -> None:
    """One guardrail's `apply_guardrail` on the request, given what LiteLLM's proxy gives it (guardrail_inputs.py):
    the structured messages or the texts it returns, and its tools, are written back into `request_data`."""
    view = GuardrailView(request_data, api_surface, *skips(hook.hook))
    tools = request_data.get("tools")
    own = [tool for tool in tools if _converted(tool)] if isinstance(tools, list) else []  # before it can edit them
    chat_tools = _chat_tools(tools, api_surface)
    given_tools = list(map(canonical, chat_tools))  # what it was given, to tell its edits (in place too) from a copy
    inputs: dict[str, Any] = {"texts": view.texts, "structured_messages": view.messages}
    if chat_tools:
        inputs["tools"] = chat_tools
    if view.tool_calls:
        inputs["tool_calls"] = view.tool_calls
    if view.images:
        inputs["images"] = view.images
    if isinstance(request_data.get("model"), str):
        inputs["model"] = request_data["model"]
    result = await called(
        call, hook, GUARDRAIL, inputs=inputs, request_data=request_data, input_type="request", logging_obj=logging_obj
    )
    if not isinstance(result, dict):
        raise HookError(hook.name, GUARDRAIL, f"returned {type(result).__name__}, not the guardrail inputs")
    returned_messages = _listed(hook, result, "structured_messages", None)
    # Lists left out of what it returns are the ones it was given, which it may have edited in place (as LiteLLM's
    # proxy, which gives a guardrail the request's own tool calls, applies such edits).
    returned_texts = _listed(hook, result, "texts", view.texts)
    returned_calls = _listed(hook, result, "tool_calls", view.tool_calls)
    if isinstance(returned_messages, list) and returned_messages is not view.messages:
        view.write_messages(returned_messages)
    else:
        if isinstance(returned_texts, list) and returned_texts != view.given_texts:  # edited in place or anew
            given = len(view.given_texts)
            if len(returned_texts) != given or not all(isinstance(text, str) for text in returned_texts):
                raise HookError(
                    hook.name, GUARDRAIL, f"returned {len(returned_texts)} texts for the {given} it was given"
                )
            view.write_texts(returned_texts)
        else:
            view.write_system_edit()
        if isinstance(returned_calls, list) and returned_calls != view.given_calls:
            problem = view.write_tool_calls(returned_calls)
            if problem is not None:
                raise HookError(hook.name, GUARDRAIL, problem)
    # Left out, the list it was given, which it may have edited in place. Compared as JSON (sorted keys), not by
    # identity: a copy of the tools it was given changes nothing, so the request keeps its own declarations, whose
    # bytes a tool policy knows the client's own by (on `/v1/messages`, converted back they would lose the fields a
    # function tool has no place for, and a client's own tool would become one the policy may refuse).
    returned_tools = _listed(hook, result, "tools", chat_tools)
    if isinstance(returned_tools, list) and list(map(canonical, returned_tools)) != given_tools:
        request_data["tools"] = _route_tools(returned_tools, request_data.get("tools"), own, given_tools, api_surface)


def _listed(hook: BoundHook, result: dict[str, Any], key: str, given: list[Any] | None) -> list[Any] | None:
    """What a guardrail returned under `key` (`given` when it left the key out): a list, or None (no edit). A tuple
    is taken as its list, as LiteLLM's proxy (which indexes what it returns) takes one. Anything else (a generator,
    a map, a string, an object) is a hook error: dropped, its edit would be lost and the words it masked reach the
    app; LiteLLM's proxy fails on one too."""
    value = result.get(key, given)
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    raise HookError(hook.name, GUARDRAIL, f"returned {key} as {type(value).__name__}, not a list")


def _chat_tools(tools: Any, api_surface: str) -> list[Any]:
    """The request's tools as OpenAI function tools, which guardrails read on every route (as in LiteLLM)."""
    if not isinstance(tools, list):
        return []
    if api_surface != "anthropic_messages":
        return tools
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("input_schema", {}),
            },
        }
        for tool in tools
        if _converted(tool)
    ]


def _converted(tool: Any) -> bool:
    """Whether a Messages tool is one guardrails are given as an OpenAI function tool (a custom tool with a name; one
    without is kept as sent, for the app to answer as it would without a guardrail)."""
    return (
        isinstance(tool, dict)
        and "input_schema" in tool
        and tool.get("type") in (None, "custom")
        and isinstance(tool.get("name"), str)
    )


def _route_tools(
    returned: list[Any], current: Any, own: list[Any], given_tools: list[bytes], api_surface: str
) -> list[Any]:
    """A guardrail's returned tools in the route's own shape; provider-native tools it never saw are kept (as it left
    the request's list, `current`). A function tool it gave back as it was given (`given_tools`: their JSON) is the
    request's own declaration (`own`, the custom tools as they stood before it ran, so that one it added in place
    pairs with nothing), unchanged (its `cache_control`, `type` and the like kept), not one converted back."""
    if api_surface != "anthropic_messages":
        return returned
    native = [tool for tool in current if not _converted(tool)] if isinstance(current, list) else []
    given: dict[bytes, list[Any]] = {}  # in order: two declarations that convert alike are each given back once
    for key, declaration in zip(given_tools, own, strict=True):
        given.setdefault(key, []).append(declaration)
    converted = []
    for tool in returned:
        if owns := given.get(canonical(tool)):
            converted.append(owns.pop(0))
            continue
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and tool.get("type") == "function":
            converted.append(
                {
                    "name": function.get("name"),
                    "description": function.get("description", ""),
                    "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
                }
            )
        else:
            converted.append(tool)
    return [*native, *converted]
