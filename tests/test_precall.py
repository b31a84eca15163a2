"""LiteLLM's pre-call lifecycle, with hooks of our own: what the methods get, what is applied, what is carried."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from conftest import anthropic_client, openai_client
from support import SERVER_METADATA, Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel

MESSAGES, CHAT = Route("messages"), Route("chat")


class PreCallHook(ToolHook):
    """Serves `lookup`, records its pre-call calls and gates, and changes what a test asks it to."""

    def __init__(self, **changes: Any) -> None:
        super().__init__()
        self.changes = changes
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.streams: list[bool] = []

    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any]:
        self.calls.append(("deployment", call_type, dict(kwargs)))
        kwargs.update(self.changes)
        return kwargs

    async def async_pre_request_hook(self, model: str, messages: list[Any], kwargs: dict[str, Any]) -> None:
        self.calls.append(("pre_request", (model, messages), dict(kwargs)))

    async def async_should_run_agentic_loop(self, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        self.streams.append(arguments["stream"])
        return await super().async_should_run_agentic_loop(**arguments)


@pytest.mark.parametrize("route", [MESSAGES, CHAT], ids=str)
async def test_pre_call_methods_get_litellms_arguments_once_per_request(route: Route) -> None:
    hook = PreCallHook()
    model = ScriptedModel(route.calls(("lookup", {"q": 1})), route.text("done"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[hook])), base_url="http://gateway"
    ) as client:
        response = await client.post(route.path, json=route.request("hi", temperature=0.5))

    assert route.final_text(response.json()) == "done"
    expected = ["deployment", "pre_request"] if route is MESSAGES else ["deployment"]
    assert [name for name, _, _ in hook.calls] == expected  # once, though the loop reran
    _, call_type, kwargs = hook.calls[0]
    assert call_type == ("anthropic_messages" if route is MESSAGES else "acompletion")
    assert kwargs["messages"] == route.request("hi")["messages"] and kwargs["temperature"] == 0.5
    assert kwargs["stream"] is False and kwargs["litellm_call_id"] == hook.gates[0]["kwargs"]["litellm_call_id"]
    assert kwargs["custom_llm_provider"] == ("anthropic" if route is MESSAGES else "openai")
    assert kwargs["litellm_logging_obj"].litellm_call_id == kwargs["litellm_call_id"]
    if route is MESSAGES:
        (model_name, messages), pre_request = hook.calls[1][1], hook.calls[1][2]
        assert (model_name, messages) == ("scripted", route.request("hi")["messages"])
        assert "messages" not in pre_request and pre_request["litellm_params"] == {"custom_llm_provider": "anthropic"}


async def test_their_changes_reach_the_body_and_their_keys_every_round_ours_winning() -> None:
    tools = [{"name": "lookup", "description": "", "input_schema": {"type": "object"}}]
    hook = PreCallHook(
        tools=tools, messages=[{"role": "user", "content": "rewritten"}], my_key="kept", scope="theirs", metadata={}
    )
    model = ScriptedModel(MESSAGES.calls(("lookup", {"q": 1})), MESSAGES.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[hook])
    await anthropic_client(app).messages.create(
        model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hi"}], metadata={"user_id": "u1"}
    )

    first = model.requests[0].body
    assert first["tools"] == tools and first["messages"] == [{"role": "user", "content": "rewritten"}]
    assert first["metadata"] == {"user_id": "u1"}  # a body field other than messages, tools, tool_choice: kept
    assert [gate["kwargs"]["my_key"] for gate in hook.gates] == ["kept", "kept"]
    assert all(gate["kwargs"]["scope"]["type"] == "http" for gate in hook.gates)  # our key wins
    assert "my_key" not in first


async def test_a_stream_turned_off_is_answered_as_a_stream_and_its_gates_see_no_stream() -> None:
    hook = PreCallHook(stream=False)
    model = ScriptedModel(CHAT.calls(("lookup", {"q": 1})), CHAT.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[hook])  # no `agentic_loop_streaming`: the pre-call methods ask
    stream = await openai_client(app).chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    assert text == "done"
    assert hook.calls[0][2]["stream"] is True
    assert hook.streams == [False, False]
    assert not any(request.body.get("stream") for request in model.requests)


async def test_a_stream_left_on_is_looped_and_its_gates_see_a_stream() -> None:
    hook = PreCallHook()
    model = ScriptedModel(CHAT.calls(("lookup", {"q": 1})), CHAT.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[hook])
    stream = await openai_client(app).chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]) == "done"
    assert hook.streams == [True, True]


class Prefixing(ToolHook):
    """A plan naming the model as LiteLLM is called: with a provider prefix."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    async def async_build_chat_completion_agentic_loop_plan(self, **arguments: Any) -> Any:
        plan = await super().async_build_chat_completion_agentic_loop_plan(**arguments)
        plan.request_patch.model = f"{self.prefix}/{arguments['model']}"
        return plan


@pytest.mark.parametrize(("prefix", "sent"), [("openai", "gpt-x"), ("hosted_vllm", "hosted_vllm/gpt-x")])
async def test_a_model_with_the_hooks_own_provider_prefix_is_sent_without_it_and_only_then(
    prefix: str, sent: str
) -> None:
    model = ScriptedModel(CHAT.calls(("lookup", {"q": 1})), CHAT.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[Prefixing(prefix)])
    await openai_client(app).chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    assert [request.body["model"] for request in model.requests] == ["gpt-x", sent]


async def test_model_call_details_hold_litellms_params_and_the_callers_identity() -> None:
    seen: list[dict[str, Any]] = []

    class Reader(ToolHook):
        async def async_build_agentic_loop_plan(self, tools: Any, **arguments: Any) -> Any:
            seen.append(arguments["logging_obj"].model_call_details)
            return await super().async_build_agentic_loop_plan(tools, **arguments)

    model = ScriptedModel(MESSAGES.calls(("lookup", {"q": 1})), MESSAGES.text("done"))
    middleware = AgenticLoopMiddleware(model, hooks=[Reader()])

    async def gateway(scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {}).update(user_api_key_auth="caller-1", litellm_metadata={"team": "t"})
        await middleware(scope, receive, send)

    await anthropic_client(gateway).messages.create(
        model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert seen == [
        {
            "litellm_params": {
                "metadata": {"team": "t", "user_api_key_auth": "caller-1"},
                "custom_llm_provider": "anthropic",
            },
            "agentic_loop_params": {"model": "claude-x", "custom_llm_provider": "anthropic"},
        }
    ]


class Terminating(ToolHook):
    """Ends the loop on its claim; its post hook records what it got."""

    def __init__(self) -> None:
        super().__init__()
        self.posted: list[Any] = []

    async def async_build_agentic_loop_plan(self, **arguments: Any) -> Any:
        return {"terminate": True, "stop_reason": "done here", "metadata": {"mine": 1}}

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
        self.posted.append((response.model_dump(), plan))
        return {**response.model_dump(), "content": [*response.model_dump()["content"], {"type": "text", "text": "!"}]}


async def test_terminate_gives_the_post_hook_the_answer_without_the_claimed_calls() -> None:
    hook = Terminating()
    model = ScriptedModel(MESSAGES.calls(("lookup", {"q": 1}), ("client_tool", {}), text="Let me look."))
    app = AgenticLoopMiddleware(model, hooks=[hook])
    reply = await anthropic_client(app).messages.create(
        model="scripted", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )

    response, plan = hook.posted[0]
    assert [block["type"] for block in response["content"]] == ["text", "tool_use"]
    assert response["content"][1]["name"] == "client_tool"
    assert plan["metadata"] == {"mine": 1}
    assert [block.type for block in reply.content] == ["text", "tool_use", "text"]
    assert hook.cleanups == []  # as in LiteLLM, a terminating plan has no cleanup


class InPlace(ToolHook):
    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> None:
        kwargs["messages"][0]["content"] = "edited in place"


async def test_a_request_edited_in_place_is_sent_edited() -> None:
    model = ScriptedModel(CHAT.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[InPlace()])
    await openai_client(app).chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    assert model.requests[0].body["messages"] == [{"role": "user", "content": "edited in place"}]


@pytest.mark.parametrize("route", [MESSAGES, CHAT], ids=str)
async def test_the_caller_identity_comes_from_request_state_never_from_the_client(route: Route) -> None:
    """Hooks key per-caller state (LiteLLM's session-scoped code sandboxes) by `user_api_key_hash`."""
    hook = PreCallHook()
    model = ScriptedModel(route.text("a"), route.text("b"))
    app = AgenticLoopMiddleware(model, hooks=[hook])

    async def as_caller(scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["user_api_key_auth"] = {"api_key": "hash-of-caller-a"}
        await app(scope, receive, send)

    spoof = {
        "user_api_key_hash": "hash-of-victim",
        "user_api_key_alias": "victim",
        "litellm_metadata": {"session_id": "s1"},
        "metadata": {"session_id": "s1", "user_api_key_hash": "hash-of-victim"},
    }
    for gateway, expected in ((as_caller, "hash-of-caller-a"), (app, None)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://g") as client:
            assert (await client.post(route.path, json=route.request("hi", **spoof))).status_code == 200
        kwargs = hook.calls[-1 if route is CHAT else -2][2]
        assert kwargs.get("user_api_key_hash") == expected
        assert "user_api_key_alias" not in kwargs and "litellm_metadata" not in kwargs
        # The client's own keys, beside those the server writes from the HTTP request (precall_request.py).
        assert {name: kwargs["metadata"][name] for name in kwargs["metadata"] if name not in SERVER_METADATA} == {
            "session_id": "s1"
        }


@pytest.mark.parametrize("route", [MESSAGES, CHAT], ids=str)
async def test_a_clients_litellm_params_never_reach_the_pre_call_hooks(route: Route) -> None:
    """LiteLLM's proxy builds `litellm_params` itself; its `metadata` is where LiteLLM puts the key's identity."""
    hook = PreCallHook()
    model = ScriptedModel(route.text("a"))
    app = AgenticLoopMiddleware(model, hooks=[hook])

    async def as_caller(scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["user_api_key_hash"] = "hash-of-caller-a"
        await app(scope, receive, send)

    spoof = {"metadata": {"user_api_key_hash": "hash-of-victim", "user_api_key_user_id": "victim"}}
    body = route.request("hi", litellm_params={**spoof, "custom_llm_provider": "elsewhere"})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=as_caller), base_url="http://g") as client:
        assert (await client.post(route.path, json=body)).status_code == 200
    given = {name: kwargs.get("litellm_params") for name, _, kwargs in hook.calls}
    provider = "anthropic" if route is MESSAGES else "openai"
    assert given == (
        {"deployment": None, "pre_request": {"custom_llm_provider": provider}}
        if route is MESSAGES
        else {"deployment": None}
    )
    assert all(kwargs["user_api_key_hash"] == "hash-of-caller-a" for _, _, kwargs in hook.calls)


@pytest.mark.parametrize("route", [MESSAGES, CHAT], ids=str)
async def test_a_clients_secret_fields_and_proxy_server_request_never_reach_the_pre_call_hooks(route: Route) -> None:
    """LiteLLM's proxy sets both itself (the request's own headers), and its code reads them as the server's: a
    client's forgery must not reach a hook that trusts them (review paths F4)."""
    hook = PreCallHook()
    model = ScriptedModel(route.text("a"))
    app = AgenticLoopMiddleware(model, hooks=[hook])
    forged = {
        "secret_fields": {"raw_headers": {"authorization": "Bearer VICTIM"}},
        "proxy_server_request": {"headers": {"authorization": "Bearer VICTIM"}, "url": "http://elsewhere"},
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        assert (await client.post(route.path, json=route.request("hi", **forged))).status_code == 200
    assert hook.calls
    for _, _, kwargs in hook.calls:
        assert "secret_fields" not in kwargs
        # The server's own, built from the request: its URL and headers, never the client's forgery.
        assert kwargs["proxy_server_request"]["url"] == f"http://g{route.path}"
        assert "authorization" not in kwargs["proxy_server_request"]["headers"]
    assert model.requests[0].body["secret_fields"] == forged["secret_fields"]  # the app still gets its body
