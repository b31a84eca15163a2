"""Loop safety: the limit, repeated tool calls, the claimed calls removed, fields a client may not set."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import anthropic_client, http_client, openai_client
from starlette.types import ASGIApp, Receive, Scope, Send
from support import Route, ToolHook, post

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, ConfigurationError
from agentic_middleware.testing import ScriptedModel


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


def endless(route: Route, tool: str = "lookup") -> ScriptedModel:
    """A model that calls the tool with a new input every time."""
    return ScriptedModel(*(route.calls((tool, {"n": n})) for n in range(20)))


class SetState:
    """An outer middleware standing in for trusted server code that sets `request.state`."""

    def __init__(self, app: ASGIApp, **state: Any) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {}).update(self.state)
        await self.app(scope, receive, send)


async def test_the_default_limit_allows_three_reruns_then_ends_the_turn(route: Route) -> None:
    model = endless(route)
    hook = ToolHook("lookup")
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await post(client, route, route.request())

    assert len(model.requests) == 5  # the first call, 3 reruns, the closing call
    body = response.json()
    assert route.tool_names(body) == []
    assert route.stop(body) == ("end_turn" if route.name == "messages" else "stop")
    assert len(hook.plans) == 3  # the refused round built no plan, nor the closing call's
    assert [gate["kwargs"]["max_agentic_loops"] for gate in hook.gates] == [3, 3, 3, 3, 3]


async def test_the_limit_is_set_per_middleware_and_per_request(route: Route) -> None:
    model = endless(route)
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], max_agentic_loops=5)
    async with http_client(SetState(app, max_agentic_loops=1)) as client:
        await post(client, route, route.request())
    assert len(model.requests) == 3  # each time: the first call, the reruns, the closing call

    model = endless(route)
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], max_agentic_loops=5)) as client:
        await post(client, route, route.request())
    assert len(model.requests) == 7


async def test_a_patch_may_change_the_limit_for_the_rest_of_the_request(route: Route) -> None:
    class Tightening(ToolHook):
        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_agentic_loop_plan(tools, **arguments)
            plan.request_patch.kwargs = {"max_agentic_loops": 2}
            return plan

        async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments)
            plan.request_patch.kwargs = {"max_agentic_loops": 2}
            return plan

    model = endless(route)
    async with http_client(AgenticLoopMiddleware(model, hooks=[Tightening()], max_agentic_loops=10)) as client:
        await post(client, route, route.request())
    assert len(model.requests) == 4  # 2 reruns, then the closing call


async def test_a_bad_limit_in_request_state_is_a_500_that_names_it(route: Route) -> None:
    model = endless(route)
    app = SetState(AgenticLoopMiddleware(model, hooks=[ToolHook()]), max_agentic_loops="many")
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 500
    assert "request.state.max_agentic_loops" in route.error(response.json())[1]


@pytest.mark.parametrize("limit", [-1, True, 2.5, "3"])
def test_a_bad_configured_limit_fails_at_start(limit: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_agentic_loops"):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[ToolHook()], max_agentic_loops=limit)


async def test_a_repeated_call_with_fresh_ids_stops_the_loop(route: Route) -> None:
    # Same tool, same input (keys in another order), a new id each time.
    model = ScriptedModel(
        route.calls(("lookup", {"a": 1, "b": 2}, "id_1")),
        route.calls(("lookup", {"b": 2, "a": 1}, "id_2")),
        route.text("never reached"),
    )
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await post(client, route, route.request())

    assert len(model.requests) == 3  # the closing call answers the repeat
    assert len(hook.plans) == 1
    assert route.tool_names(response.json()) == []


async def test_the_order_of_calls_does_not_change_the_fingerprint(route: Route) -> None:
    model = ScriptedModel(
        route.calls(("lookup", {"q": "x"}), ("lookup", {"q": "y"})),
        route.calls(("lookup", {"q": "y"}), ("lookup", {"q": "x"})),
        route.text("never reached"),
    )
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await post(client, route, route.request())
    assert len(model.requests) == 3  # the closing call answers the repeat


async def test_at_the_limit_only_the_claimed_calls_are_removed() -> None:
    """The client's own call survives, with the stop reason that says so; ours are gone. Both SDKs parse it."""
    messages, chat = Route("messages"), Route("chat")
    model = ScriptedModel(
        messages.calls(("lookup", {"n": 1})),
        messages.calls(("lookup", {"n": 2}), ("client_tool", {"x": 1}), text="Working on it."),
        chat.calls(("lookup", {"n": 1})),
        chat.calls(("lookup", {"n": 2}), ("client_tool", {"x": 1}), text="Working on it."),
    )
    app = AgenticLoopMiddleware(model, hooks=[ToolHook("lookup")], max_agentic_loops=1)

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    )
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}]
    )

    assert [block.type for block in reply.content] == ["text", "tool_use"]
    assert reply.content[1].name == "client_tool"  # type: ignore[union-attr]
    assert reply.stop_reason == "tool_use"
    calls = completion.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["client_tool"]  # type: ignore[union-attr]
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_a_refused_round_also_removes_what_the_other_hooks_claim(route: Route) -> None:
    model = ScriptedModel(
        route.calls(("lookup", {"n": 1})),
        route.calls(("lookup", {"n": 2}), ("search", {"q": "s"})),
    )
    app = AgenticLoopMiddleware(
        model, hooks=[ToolHook("lookup"), ToolHook("search")], max_agentic_loops=1, closing="text"
    )
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert route.tool_names(response.json()) == []
    assert route.stop(response.json()) == ("end_turn" if route.name == "messages" else "stop")


async def test_client_sent_internal_fields_never_reach_the_app_or_raise_the_limit(route: Route) -> None:
    model = endless(route)
    body = route.request(max_agentic_loops=50, _agentic_loop_depth=-10, _agentic_internal=True)
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await post(client, route, body)

    assert len(model.requests) == 5
    for request in model.requests:
        assert not any(key == "max_agentic_loops" or key.startswith("_agentic_") for key in request.body)
        assert int(request.headers["content-length"]) == len(request.raw)


async def test_internal_fields_are_removed_from_streaming_requests_too(route: Route) -> None:
    model = ScriptedModel(route.text("streamed or not, it is passed through"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await post(client, route, route.request(stream=True, max_agentic_loops=9))
    assert "max_agentic_loops" not in model.requests[0].body


async def test_tool_choice_is_dropped_on_reruns_unless_the_patch_sets_it(route: Route) -> None:
    forced = {"type": "tool", "name": "lookup"} if route.name == "messages" else "required"

    class Forcing(ToolHook):
        def __init__(self, keep: bool) -> None:
            super().__init__("lookup")
            self.keep = keep

        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_agentic_loop_plan(tools, **arguments)
            return self.patch(plan)

        async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments)
            return self.patch(plan)

        def patch(self, plan: AgenticLoopPlan) -> AgenticLoopPlan:
            if self.keep:
                assert plan.request_patch is not None
                plan.request_patch.optional_params = {"tool_choice": "auto"}
            return plan

    for keep, expected in [(False, None), (True, "auto")]:
        model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
        async with http_client(AgenticLoopMiddleware(model, hooks=[Forcing(keep)])) as client:
            await post(client, route, route.request(tool_choice=forced))
        assert model.requests[0].body["tool_choice"] == forced
        assert model.requests[1].body.get("tool_choice") == expected


async def test_a_hook_cannot_leak_internal_fields_into_the_body(route: Route) -> None:
    class Leaky(ToolHook):
        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            return self.leak(await super().async_build_agentic_loop_plan(tools, **arguments))

        async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            return self.leak(await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments))

        def leak(self, plan: AgenticLoopPlan) -> AgenticLoopPlan:
            assert isinstance(plan.request_patch, AgenticLoopRequestPatch)
            plan.request_patch.optional_params = {"_agentic_loop_depth": 5, "max_agentic_loops": 9}
            return plan

    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Leaky()])) as client:
        await post(client, route, route.request())
    assert set(model.requests[1].body) == set(model.requests[0].body) | {"messages"}
