"""What a request hook does to the request in place is judged and sent as if it had returned a new body.

A hook (a LiteLLM `async_pre_agentic_loop_request_hook`, or a gate before a rerun) may change the request it was
given in place instead of returning a new one. That must not carry anything past the checks a returned body passes:
a tool the caller's policy denies is not made "the client's own" by appending it to the client's `tools` list or by
renaming one of the client's tools; fields only trusted code may set never reach the model app; and an edit Python
holds equal (`1` to `True`, a key moved) is still sent, never replaced by the client's bytes.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import http_client

from agentic_middleware import AgenticLoopMiddleware, ServerTools, ToolPolicy
from agentic_middleware import server_tool as tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

DENIED = ToolPolicy(denied_tools=["delete_*"])


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


ROUTES = {
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]},
        message("done"),
    ),
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "go"}]}, None),
    "responses": ("/v1/responses", {"model": "m", "input": "go"}, response("done")),
}


def answer_of(route: str) -> dict[str, Any]:
    answer = ROUTES[route][2]
    return answer if answer is not None else chat_completion(content="done")


def declaration(route: str, name: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {}}
    if route == "messages":
        return {"name": name, "description": name, "input_schema": schema}
    if route == "chat":
        return {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}
    return {"type": "function", "name": name, "description": name, "parameters": schema}


def names(body: dict[str, Any]) -> list[str]:
    return [tool.get("name") or tool["function"]["name"] for tool in body.get("tools") or []]


class InPlace:
    """A request hook that changes the request it is given in place, by `edit`, and returns it or None."""

    def __init__(self, edit: Any, returns: bool) -> None:
        self.edit = edit
        self.returns = returns

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.edit(request, kwargs["_agentic_loop_api_surface"])
        return request if self.returns else None


def surface_route(api_surface: str) -> str:
    return {"anthropic_messages": "messages", "chat_completions": "chat"}.get(api_surface, "responses")


async def first_call(route: str, *hooks: Any, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """One request through the middleware with `hooks` under `DENIED`: the body of the model app's first call."""
    path, body, _ = ROUTES[route]
    model = ScriptedModel(default=answer_of(route))
    app = AgenticLoopMiddleware(model, hooks=list(hooks), tool_policy=lambda scope: DENIED)
    async with http_client(app) as client:
        reply = await client.post(path, json={**body, **extra, **({"stream": True} if stream else {})})
    assert reply.status_code == 200, reply.text
    return model.requests[0].body


def append_denied(request: dict[str, Any], api_surface: str) -> None:
    request["tools"].append(declaration(surface_route(api_surface), "delete_everything"))


def rename_to_denied(request: dict[str, Any], api_surface: str) -> None:
    own = request["tools"][0]
    (own.get("function") or own)["name"] = "delete_everything"


@pytest.mark.parametrize("returns", [True, False], ids=["returned", "returned-none"])
@pytest.mark.parametrize("edit", [append_denied, rename_to_denied], ids=["appended", "renamed"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_hook_cannot_make_a_denied_tool_the_clients_own_in_place(route: str, edit: Any, returns: bool) -> None:
    own = declaration(route, "my_own_tool")
    sent = await first_call(route, InPlace(edit, returns), ServerTools([lookup]), tools=[own])
    assert "delete_everything" not in names(sent)
    if edit is append_denied:  # the client's own tool stays: the client runs it
        assert "my_own_tool" in names(sent)


async def test_a_hook_cannot_make_a_denied_tool_the_clients_own_in_a_stream() -> None:
    own = declaration("messages", "my_own_tool")
    sent = await first_call("messages", InPlace(append_denied, False), ServerTools([lookup]), stream=True, tools=[own])
    assert names(sent) == ["my_own_tool", "lookup"]


class AppendingTools(ServerTools):
    """A tool hook (so asked for token counts too) that appends to the client's own `tools` list first."""

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        append_denied(request, kwargs["_agentic_loop_api_surface"])
        return await super().async_pre_agentic_loop_request_hook(request, logging_obj, kwargs)


async def test_a_hook_cannot_make_a_denied_tool_the_clients_own_in_a_token_count() -> None:
    model = ScriptedModel(default={"input_tokens": 1})
    app = AgenticLoopMiddleware(model, hooks=[AppendingTools([lookup])], tool_policy=lambda scope: DENIED)
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [declaration("messages", "mine")]}
    async with http_client(app) as client:
        reply = await client.post("/v1/messages/count_tokens", json=body)
    assert reply.status_code == 200, reply.text
    assert names(model.requests[0].body) == ["mine", "lookup"]


def add_internal(request: dict[str, Any], api_surface: str) -> None:
    request["max_agentic_loops"] = 99
    request["_agentic_secret"] = "for trusted code only"


class EditingTools(ServerTools):
    """A tool hook (asked for token counts) that edits the request in place by `edit` and returns None."""

    def __init__(self, edit: Any) -> None:
        super().__init__([lookup])
        self.edit = edit

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> None:
        self.edit(request, kwargs["_agentic_loop_api_surface"])


COUNTS = {
    "messages": ("/v1/messages/count_tokens", ROUTES["messages"][1]),
    "responses": ("/v1/responses/input_tokens", ROUTES["responses"][1]),
}


async def count(route: str, edit: Any) -> tuple[Any, ScriptedModel]:
    """The reply to a token count on `route` with a tool hook that runs `edit`, and the app that was asked."""
    model = ScriptedModel(default={"input_tokens": 1})
    path, body = COUNTS[route]
    async with http_client(AgenticLoopMiddleware(model, hooks=[EditingTools(edit)])) as client:
        return await client.post(path, json=body), model


@pytest.mark.parametrize("route", list(COUNTS))
async def test_internal_fields_a_tool_hook_adds_in_place_are_not_in_a_token_count(route: str) -> None:
    reply, model = await count(route, add_internal)
    assert reply.status_code == 200, reply.text
    sent = model.requests[0].body
    assert "max_agentic_loops" not in sent and "_agentic_secret" not in sent and sent["model"] == "m"


def not_json(request: dict[str, Any], api_surface: str) -> None:
    request["metadata"] = {"when": object()}


@pytest.mark.parametrize("route", list(COUNTS))
async def test_a_tool_hook_that_leaves_a_count_not_json_is_a_hook_error_in_the_routes_shape(route: str) -> None:
    reply, model = await count(route, not_json)
    assert reply.status_code == 500 and not model.requests
    error = reply.json()["error"]
    assert error["type"] == "api_error" if route == "messages" else error["code"] == "agentic_hook_error"


class ReturnsList(ServerTools):
    """A tool hook whose request hook returns something that is not a request body."""

    def __init__(self) -> None:
        super().__init__([lookup])

    async def async_pre_agentic_loop_request_hook(self, request: Any, logging_obj: Any, kwargs: Any) -> Any:
        return [request]


@pytest.mark.parametrize("route", list(COUNTS))
async def test_a_tool_hook_that_returns_no_body_for_a_count_is_a_hook_error_in_the_routes_shape(route: str) -> None:
    """As on the route: never a count sent without the server's tools, short and without an error."""
    model = ScriptedModel(default={"input_tokens": 1})
    path, body = COUNTS[route]
    async with http_client(AgenticLoopMiddleware(model, hooks=[ReturnsList()])) as client:
        reply = await client.post(path, json=body)
    assert reply.status_code == 500 and not model.requests
    error = reply.json()["error"]
    assert error["type"] == "api_error" if route == "messages" else error["code"] == "agentic_hook_error"


@pytest.mark.parametrize("returns", [True, False], ids=["returned", "returned-none"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_internal_fields_a_hook_adds_in_place_never_reach_the_model_app(route: str, returns: bool) -> None:
    sent = await first_call(route, InPlace(add_internal, returns))
    assert "max_agentic_loops" not in sent and "_agentic_secret" not in sent
    assert sent["model"] == "m"


class NewBody:
    """A request hook that returns a new body (which the middleware cleans), for a later hook to edit in place."""

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        return {**request, "temperature": 0.5}


async def test_internal_fields_added_in_place_after_an_earlier_hooks_body_never_reach_the_model_app() -> None:
    sent = await first_call("messages", NewBody(), InPlace(add_internal, False))
    assert sent["temperature"] == 0.5
    assert "max_agentic_loops" not in sent and "_agentic_secret" not in sent


def to_true(request: dict[str, Any], api_surface: str) -> None:
    request["metadata"]["flag"] = True  # == 1 in Python


def to_float(request: dict[str, Any], api_surface: str) -> None:
    request["top_p"] = 1.0  # == 1 in Python


def key_moved(request: dict[str, Any], api_surface: str) -> None:
    request["metadata"] = {"b": request["metadata"].pop("b"), **request["metadata"]}


@pytest.mark.parametrize(
    ("edit", "expected"),
    [(to_true, b'"flag":true'), (to_float, b'"top_p":1.0'), (key_moved, b'"metadata":{"b":2,"flag":1}')],
    ids=["1-to-true", "1-to-1.0", "key-moved"],
)
async def test_an_edit_python_holds_equal_is_still_sent(edit: Any, expected: bytes) -> None:
    path, body, _ = ROUTES["messages"]
    model = ScriptedModel(default=message("done"))
    app = AgenticLoopMiddleware(model, hooks=[InPlace(edit, False)])
    async with http_client(app) as client:
        reply = await client.post(path, json={**body, "top_p": 1, "metadata": {"flag": 1, "b": 2}})
    assert reply.status_code == 200, reply.text
    assert expected in model.requests[0].raw


async def test_a_hook_that_changes_nothing_leaves_the_clients_bytes_as_they_were() -> None:
    raw = b'{ "model" : "m",\n  "max_tokens": 10, "top_p": 1, "messages": [{"role": "user", "content": "go"}] }'
    model = ScriptedModel(default=message("done"))
    app = AgenticLoopMiddleware(model, hooks=[InPlace(lambda request, surface: None, False)])
    async with http_client(app) as client:
        reply = await client.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 200, reply.text
    assert model.requests[0].raw == raw


class DeploymentAppends:
    """A LiteLLM pre-call deployment hook that appends a tool to the client's own `tools` list in place."""

    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any]:
        kwargs["tools"].append(declaration("messages", "delete_everything"))
        return kwargs

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> None:
        return None  # a hook of the loop too, so that the middleware takes it


async def test_a_pre_call_hook_cannot_make_a_denied_tool_the_clients_own_in_place() -> None:
    own = declaration("messages", "my_own_tool")
    sent = await first_call("messages", DeploymentAppends(), ServerTools([lookup]), tools=[own])
    assert names(sent) == ["my_own_tool", "lookup"]


class ToolsGuardrail:
    """A LiteLLM-style guardrail that gives back the tools it was given: copied, or edited in place by `edit`."""

    event_hook = "pre_call"

    def __init__(self, edit: Any = None) -> None:
        self.edit = edit

    async def apply_guardrail(
        self, inputs: dict[str, Any], request_data: dict[str, Any], input_type: str, logging_obj: Any = None
    ) -> dict[str, Any]:
        if self.edit is None:
            return {**inputs, "tools": copy.deepcopy(inputs["tools"])}
        self.edit(inputs["tools"])
        return inputs

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> None:
        return None  # a hook of the loop too, so that the middleware takes it


# A client's own tools as Anthropic takes them, with what an OpenAI function tool has no place for.
CLIENT_TOOLS = [
    {"name": "mine", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
    {"name": "delete_my_file", "description": "mine to run", "input_schema": {"type": "object", "properties": {}}},
]


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_guardrail_that_gives_back_copied_tools_leaves_the_clients_tools_as_sent(route: str) -> None:
    own = [declaration(route, "mine"), declaration(route, "delete_my_file")] if route != "messages" else CLIENT_TOOLS
    sent = await first_call(route, ToolsGuardrail(), ServerTools([lookup]), tools=own)
    assert sent["tools"][: len(own)] == own  # each as the client sent it, its denied-looking own tool too
    assert names(sent)[len(own) :] == ["lookup"]


def drop_last(tools: list[Any]) -> None:
    tools.pop()


async def test_a_guardrails_edit_in_place_of_the_tools_it_was_given_applies_on_messages() -> None:
    sent = await first_call("messages", ToolsGuardrail(drop_last), tools=CLIENT_TOOLS)
    assert sent["tools"] == CLIENT_TOOLS[1::-1]  # the native tool first, as documented; `mine` as it was sent
