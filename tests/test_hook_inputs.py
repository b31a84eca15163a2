"""What hooks receive, and what the middleware refuses at start."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from conftest import http_client
from support import Route, ToolHook, post

from agentic_middleware import (
    AgenticHook,
    AgenticLoopLogging,
    AgenticLoopMiddleware,
    AgenticLoopPlan,
    ConfigurationError,
    CustomLogger,
    JSONObject,
)
from agentic_middleware.testing import ScriptedModel, chat_completion, tool_call


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


def test_custom_logger_is_the_hook_base_class() -> None:
    assert CustomLogger is AgenticHook


def test_a_json_object_reads_like_an_sdk_object_and_is_a_real_dict() -> None:
    from agentic_middleware.payload import parse_object

    response = parse_object(b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "f"}}]}}]}')
    assert response is not None
    assert response.choices[0].message.tool_calls[0].function.name == "f"
    assert response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert type(response.choices) is list and isinstance(response.choices[0], dict)
    assert response.absent is None and getattr(response, "content", None) is None
    with pytest.raises(KeyError):
        response["absent"]
    with pytest.raises(AttributeError):
        response.__wrapped__  # noqa: B018
    copied = copy.deepcopy(response)
    assert copied == response and isinstance(copied.choices[0], JSONObject)


async def test_hooks_receive_the_request_and_the_documented_kwargs(route: Route) -> None:
    hook = ToolHook()
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
    tools = [{"name": "client_tool"}]
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        await post(client, route, route.request(tools=tools, temperature=0.2))

    first, second = hook.gates
    assert first["model"] == "scripted"
    assert first["tools"] == tools
    assert first["provider"] == ("anthropic" if route.name == "messages" else "openai")
    kwargs = first["kwargs"]
    assert kwargs["_agentic_loop_depth"] == 0 and second["kwargs"]["_agentic_loop_depth"] == 1
    assert kwargs["max_agentic_loops"] == 3
    assert kwargs["litellm_call_id"] == second["kwargs"]["litellm_call_id"]
    assert kwargs["scope"]["path"] == route.path
    plan = hook.plans[0]
    params = plan["anthropic_messages_optional_request_params"] if route.name == "messages" else plan["optional_params"]
    request = route.request(tools=tools, temperature=0.2)
    assert params == {key: value for key, value in request.items() if key not in ("model", "messages")}
    assert plan["stream"] is False
    assert isinstance(plan["logging_obj"], AgenticLoopLogging)
    assert plan["logging_obj"].litellm_call_id == kwargs["litellm_call_id"]
    assert plan["logging_obj"].route == ("messages" if route.name == "messages" else "chat_completions")


async def test_each_client_request_gets_its_own_call_id(route: Route) -> None:
    hook = ToolHook()
    model = ScriptedModel(route.text("a"), route.text("b"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        await post(client, route, route.request())
        await post(client, route, route.request())
    ids = {gate["kwargs"]["litellm_call_id"] for gate in hook.gates}
    assert len(ids) == 2


async def test_a_hooks_edits_of_its_scope_never_reach_another_request(route: Route) -> None:
    """`kwargs["scope"]` is the client request's own scope (docs/hooks.md): what a hook writes in it, its headers and
    state included, is gone with that request; the next request's hooks and calls see their own as sent."""

    class Meddling(ToolHook):
        async def async_should_run_agentic_loop(self, **arguments: Any) -> Any:
            scope = arguments["kwargs"]["scope"]
            seen.append((scope["path"], dict(scope["headers"]).get(b"x-meddled"), scope["state"].get("meddled")))
            scope["headers"].append((b"x-meddled", b"1"))
            scope["state"]["meddled"] = True
            return await super().async_should_run_agentic_loop(**arguments)

    seen: list[tuple[Any, ...]] = []
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("a"), route.calls(("lookup", {"k": 2})))
    model.default = route.text("b")
    async with http_client(AgenticLoopMiddleware(model, hooks=[Meddling()])) as client:
        await post(client, route, route.request())
        await post(client, route, route.request())
    # Each request's first gate sees its scope as sent; its second, what its own first gate wrote.
    assert seen == [(route.path, None, None), (route.path, b"1", True)] * 2
    assert all(request.headers.get("x-meddled") is None for request in model.requests)  # never sent on a call


async def test_custom_llm_provider_is_set_on_the_middleware(route: Route) -> None:
    hook = ToolHook()
    model = ScriptedModel(route.text("a"), route.text("b"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook], custom_llm_provider="hosted_vllm")) as client:
        await post(client, route, route.request())
    per_route = {"messages": "bedrock", "chat_completions": "ollama"}
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook], custom_llm_provider=per_route)) as client:
        await post(client, route, route.request())
    assert [gate["provider"] for gate in hook.gates] == [
        "hosted_vllm",
        "bedrock" if route.name == "messages" else "ollama",
    ]


async def test_the_response_a_hook_was_given_is_not_mutated_when_the_turn_ends(route: Route) -> None:
    given: list[Any] = []

    class Keeper(ToolHook):
        async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> Any:
            given.append((response, copy.deepcopy(response)))
            return await super().async_should_run_agentic_loop(response=response, **arguments)

    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.calls(("lookup", {"n": 2})))
    app = AgenticLoopMiddleware(model, hooks=[Keeper()], max_agentic_loops=1, closing="text")
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert route.tool_names(response.json()) == []
    assert len(given) == 2
    for seen, snapshot in given:
        assert seen == snapshot


async def test_litellms_chat_only_gate_is_honoured_on_chat() -> None:
    class ChatOnly(CustomLogger):
        async def async_should_run_chat_completion_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
            return True, {}

        async def async_build_chat_completion_agentic_loop_plan(self, **_: Any) -> AgenticLoopPlan:
            return AgenticLoopPlan(response_override=chat_completion("from the chat gate"))

    model = ScriptedModel(chat_completion(tool_calls=[tool_call("t", {})]))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ChatOnly()])) as client:
        response = await post(client, Route("chat"), Route("chat").request())
    assert response.json()["choices"][0]["message"]["content"] == "from the chat gate"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"hooks": [object()]}, "is not a hook"),
        ({"routes": {"/v1/x": "completions"}}, "unknown wire format 'completions'"),
        ({"routes": {"v1/messages": "messages"}}, "is not a path"),
        ({"custom_llm_provider": 3}, "custom_llm_provider"),
        ({"custom_llm_provider": {"messages": 1}}, "custom_llm_provider"),
    ],
)
def test_set_up_mistakes_fail_when_the_middleware_is_built(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        AgenticLoopMiddleware(ScriptedModel(), **options)


def test_a_hook_class_instead_of_an_instance_fails_at_start() -> None:
    with pytest.raises(
        ConfigurationError, match=r"ToolHook is a class, not a hook: pass an instance, such as ToolHook\(\)"
    ):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[ToolHook])


def test_litellms_older_run_methods_fail_at_start_instead_of_never_running() -> None:
    class Legacy(CustomLogger):
        async def async_should_run_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
            return True, {}

        async def async_run_agentic_loop(self, **_: Any) -> Any:
            return None

    with pytest.raises(ConfigurationError, match="implements async_run_agentic_loop"):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[Legacy()])


async def test_kwargs_name_the_api_surface_as_litellm_does(route: Route) -> None:
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(ScriptedModel(route.text("x")), hooks=[hook])) as client:
        await post(client, route, route.request())
    expected = "anthropic_messages" if route.name == "messages" else "chat_completions"
    assert hook.gates[0]["kwargs"]["_agentic_loop_api_surface"] == expected


def test_a_json_object_serves_code_written_for_pydantic_responses() -> None:
    from agentic_middleware.payload import parse_object

    response = parse_object(b'{"choices": [{"message": {"content": "hi"}}], "usage": {"total_tokens": 3}}')
    assert response is not None
    dumped = response.model_dump() if hasattr(response, "model_dump") else response
    assert dumped == {"choices": [{"message": {"content": "hi"}}], "usage": {"total_tokens": 3}}
    assert type(dumped) is dict and type(dumped["choices"][0]) is dict
    assert orjson.loads(response.model_dump_json()) == dumped
    assert response.copy().choices[0].message.content == "hi"
    assert response.setdefault("usage", {}).total_tokens == 3
