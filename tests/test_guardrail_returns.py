"""What a guardrail's `apply_guardrail` returns is applied or refused, never dropped nor blamed on it for the
client's own shape.

A tool call the client sent with a null where a tool or its arguments stand (`"arguments": null`, `"custom": null`
beside a function) is read as none, and reaches the app as sent; a masking guardrail returning that call as it was
given (its mask elsewhere, in the id) was told its call was malformed, a 500 for the client's shape. A call's
name, id or type it returns as no string (an object, a number, a null) reached the app on Chat, where Messages and
Responses dropped the edit: now refused on every route. A real LiteLLM `CustomGuardrail` each; the client is httpx
on the middleware, the app a scripted model.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, body_for, masked
from test_guardrail_coverage import ANSWERS, messages_body, responses_body, turns
from test_guardrail_parts import chat_body, chat_calls

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel

NAMED = f"call_{WORD}_1"  # a word in an id or a name: the guardrail masks it, and returns the call with the mask
# Each case: (route, body), a tool call the client sent with a null in it, and WORD beside the null.
NULLS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat: arguments null": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "function", "function": {"name": "f", "arguments": None}}),
    ),
    "chat: custom null beside a function": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "function", "function": {"name": "f", "arguments": "{}"}, "custom": None}),
    ),
    "chat: function null on a custom call": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "custom", "function": None, "custom": {"name": "c", "input": "x"}}),
    ),
    "chat: a legacy function_call's arguments null": (
        "/v1/chat/completions",
        chat_body(
            {"role": "assistant", "content": None, "function_call": {"name": NAMED, "arguments": None}},
            {"role": "function", "name": NAMED, "content": "ok"},
        ),
    ),
    "responses: a function_call's arguments null": (
        "/v1/responses",
        responses_body({"type": "function_call", "call_id": "call_1", "name": NAMED, "arguments": None}),
    ),
    "messages: a tool_use's input null": (
        "/v1/messages",
        messages_body([{"type": "tool_use", "id": "toolu_1", "name": NAMED, "input": None}]),
    ),
}


@pytest.mark.parametrize("where", list(NULLS))
async def test_a_clients_null_in_a_tool_call_returned_as_given_is_kept_not_blamed(where: str) -> None:
    """The null is the client's, read as none, not the guardrail's edit: the call reaches the app with the mask and
    the null as sent, as it does under a guardrail that returns nothing of it."""
    route, body = NULLS[where]
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Masking("all")])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert model.requests[0].body[turns(route)] == masked(body[turns(route)])


class Returns(Masking):
    """Returns the tool calls it was given (copies), each as `edit` makes it."""

    def __init__(self, edit: Any) -> None:
        super().__init__("all")
        self.edit = edit

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        return {**inputs, "tool_calls": [self.edit(copy.deepcopy(call)) for call in inputs["tool_calls"]]}


def setting(value: Any, *path: str) -> Any:
    """An edit setting the field at `path` of a call to `value`."""

    def edit(call: dict[str, Any]) -> dict[str, Any]:
        holder = call
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
        return call

    return edit


CALLED = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
# Each route's history with one tool call named `f`.
HISTORIES = {
    "/v1/messages": messages_body([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]),
    "/v1/responses": responses_body({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}),
    "/v1/chat/completions": chat_calls(CALLED),
}
# Each case: the route, an edit of the call the guardrail returns, and the problem it is told.
NOT_STRINGS: dict[str, tuple[str, Any, str]] = {
    f"{route.split('/')[-1]}: a name returned as {kind}": (route, setting(value, "function", "name"), "name")
    for route in HISTORIES
    for kind, value in (("an object", {"n": "f"}), ("a number", 7), ("null", None))
}
NOT_STRINGS |= {
    "completions: an id returned as an object": ("/v1/chat/completions", setting({"x": 1}, "id"), "id"),
    "completions: a type returned as a list": ("/v1/chat/completions", setting(["function"], "type"), "type"),
    "completions: an id left out": ("/v1/chat/completions", lambda call: {**call, "id": None}, "id"),
}


@pytest.mark.parametrize("where", list(NOT_STRINGS))
async def test_a_tool_calls_string_a_guardrail_returns_as_no_string_is_refused_on_every_route(where: str) -> None:
    """A name, id or type the guardrail was given as a string and returns as anything else is no call an app reads:
    a hook error, 500 in the route's shape naming the guardrail, the app not called, on every route alike (Chat
    wrote it into the request; Messages and Responses kept the original name, dropping the edit)."""
    route, edit, field = NOT_STRINGS[where]
    model = ScriptedModel(default=ANSWERS[route]("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Returns(edit)])) as http:
        got = await http.post(route, json=HISTORIES[route])
    assert got.status_code == 500, got.text
    message = f"agentic hook Returns.apply_guardrail failed: returned a tool call whose {field} is not a string"
    assert got.json()["error"]["message"] == message
    assert model.requests == []


class ReturnsAs(Masking):
    """Masks WORD in the list it was given under `key` only, and returns it as `wrap` makes it."""

    def __init__(self, key: str, wrap: Any) -> None:
        super().__init__("all")
        self.key, self.wrap = key, wrap

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        return {**inputs, self.key: self.wrap(masked(inputs.get(self.key) or []))}


SAYING = {route: body_for(route) for route in ANSWERS}
SAYING["/v1/chat/completions"]["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
CALLING = {**HISTORIES, "/v1/chat/completions": chat_calls(CALLED | {"id": NAMED})}
# Each case: the route, the body, what the guardrail returns in place of a list, and under which key.
NOT_LISTS: dict[str, tuple[str, dict[str, Any], str, Any]] = {
    f"{route.split('/')[-1]}: texts as {kind}": (route, SAYING[route], "texts", wrap)
    for route in ANSWERS
    for kind, wrap in (("a generator", lambda texts: (text for text in texts)), ("a map", lambda t: map(str, t)))
}
NOT_LISTS |= {
    "completions: texts as a string": ("/v1/chat/completions", SAYING["/v1/chat/completions"], "texts", " ".join),
    "completions: texts as an object": ("/v1/chat/completions", SAYING["/v1/chat/completions"], "texts", dict.fromkeys),
    "completions: tool_calls as a generator": (
        "/v1/chat/completions",
        CALLING["/v1/chat/completions"],
        "tool_calls",
        iter,
    ),
    "messages: tool_calls as a generator": ("/v1/messages", CALLING["/v1/messages"], "tool_calls", iter),
    "responses: structured_messages as a generator": (
        "/v1/responses",
        responses_body({"role": "user", "content": SAID}),
        "structured_messages",
        iter,
    ),
    "completions: tools as a generator": ("/v1/chat/completions", SAYING["/v1/chat/completions"], "tools", iter),
}


@pytest.mark.parametrize("where", list(NOT_LISTS))
async def test_a_guardrails_edit_returned_as_no_list_is_a_hook_error_not_dropped(where: str) -> None:
    """Texts, tool calls, structured messages or tools returned as a generator, a map, a string or an object were
    dropped without a word, and the words the guardrail masked reached the app: now a hook error, 500 in the route's
    shape naming the guardrail, the app not called (LiteLLM's proxy, which takes their length, fails on them too)."""
    route, body, key, wrap = NOT_LISTS[where]
    model = ScriptedModel(default=ANSWERS[route]("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ReturnsAs(key, wrap)])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 500, got.text
    assert got.json()["error"]["message"].startswith(
        f"agentic hook ReturnsAs.apply_guardrail failed: returned {key} as "
    )
    assert got.json()["error"]["message"].endswith(", not a list")
    assert model.requests == []


TUPLES = {
    "texts": ("/v1/chat/completions", SAYING["/v1/chat/completions"]),
    "tool_calls": ("/v1/chat/completions", CALLING["/v1/chat/completions"]),
    "structured_messages": ("/v1/responses", responses_body({"role": "user", "content": SAID})),
}


@pytest.mark.parametrize("key", list(TUPLES))
async def test_a_guardrails_edit_returned_as_a_tuple_is_applied_as_litellm_applies_it(key: str) -> None:
    """A tuple is a list to LiteLLM's proxy, which indexes what a guardrail returns: its masks reach the app."""
    route, body = TUPLES[key]
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ReturnsAs(key, tuple)])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert model.requests[0].body[turns(route)] == masked(body[turns(route)])
