"""Each plan field, hook order, duck-typed hooks and dict plans, post and cleanup hooks, on both routes."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from conftest import http_client
from support import Route, ToolHook, post

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.testing import ScriptedModel


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


class PlanHook(CustomLogger):
    """Says yes to every response and answers with a fixed plan; records the order it was asked in."""

    def __init__(self, plan: Any, asked: list[str] | None = None, name: str = "plan") -> None:
        self.plan = plan
        self.asked = asked if asked is not None else []
        self.name = name
        self.post_calls: list[Any] = []
        self.cleanups: list[Any] = []

    async def async_should_run_agentic_loop(self, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        self.asked.append(self.name)
        return True, {"tool_calls": []}

    async def async_build_agentic_loop_plan(self, **arguments: Any) -> Any:
        return self.plan(arguments) if callable(self.plan) else self.plan

    async def async_build_chat_completion_agentic_loop_plan(self, **arguments: Any) -> Any:
        return self.plan(arguments) if callable(self.plan) else self.plan

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
        self.post_calls.append(response)
        return response

    async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: dict[str, Any]) -> None:
        self.cleanups.append(plan)


def rerun_with(text: str) -> Any:
    def plan(arguments: dict[str, Any]) -> AgenticLoopPlan:
        messages = [*arguments["messages"], {"role": "user", "content": text}]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=messages))

    return plan


async def test_response_override_is_the_final_body(route: Route) -> None:
    model = ScriptedModel(route.text("from the model"))
    override = route.text("from the hook")
    app = AgenticLoopMiddleware(model, hooks=[PlanHook(AgenticLoopPlan(response_override=override))])

    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 200
    assert response.json() == override
    assert int(response.headers["content-length"]) == len(response.content)
    assert len(model.requests) == 1


async def test_terminate_returns_the_current_response(route: Route) -> None:
    first = route.calls(("lookup", {"k": 1}))
    model = ScriptedModel(first, route.text("never asked"))
    hook = PlanHook(AgenticLoopPlan(terminate=True, stop_reason="enough"))

    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await post(client, route, route.request())

    assert response.json() == first
    assert len(model.requests) == 1


async def test_a_plan_that_does_not_act_passes_to_the_next_hook(route: Route) -> None:
    asked: list[str] = []
    model = ScriptedModel(route.text("first"), route.text("second"))
    hooks = [
        PlanHook(AgenticLoopPlan(run_agentic_loop=False), asked, "idle"),
        PlanHook(rerun_with("go on"), asked, "acting"),
        PlanHook(AgenticLoopPlan(response_override={"never": "used"}), asked, "last"),
    ]
    # The acting hook reruns once; on the second answer its rerun is refused by the limit.
    app = AgenticLoopMiddleware(model, hooks=hooks, max_agentic_loops=1)

    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == "second"
    assert asked[:2] == ["idle", "acting"]
    assert model.requests[1].body["messages"][-1] == {"role": "user", "content": "go on"}


async def test_hooks_are_asked_in_list_order_and_the_first_acting_one_wins(route: Route) -> None:
    asked: list[str] = []
    model = ScriptedModel(route.text("model"))
    hooks = [
        PlanHook(AgenticLoopPlan(response_override=route.text("first")), asked, "first"),
        PlanHook(AgenticLoopPlan(response_override=route.text("second")), asked, "second"),
    ]
    async with http_client(AgenticLoopMiddleware(model, hooks=hooks)) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == "first"
    assert asked == ["first"]


async def test_rerun_patch_fields_replace_and_merge_into_the_request(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))

    def plan(arguments: dict[str, Any]) -> AgenticLoopPlan:
        patch = AgenticLoopRequestPatch(
            model="bigger-model",
            messages=[{"role": "user", "content": "patched"}],
            tools=[{"name": "other"}],
            max_tokens=7,
            optional_params={"temperature": 0.5},
            kwargs={"note": "for the next round"},
        )
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)

    hook = PlanHook(plan)
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook], max_agentic_loops=1)) as client:
        await post(client, route, route.request(top_p=0.9))

    rerun = model.requests[1].body
    assert rerun["model"] == "bigger-model"
    assert rerun["messages"] == [{"role": "user", "content": "patched"}]
    assert rerun["tools"] == [{"name": "other"}]
    assert rerun["max_tokens"] == 7
    assert rerun["temperature"] == 0.5 and rerun["top_p"] == 0.9
    assert "note" not in rerun  # patch kwargs go to hooks, never into the body


async def test_patch_kwargs_reach_the_next_rounds_hooks(route: Route) -> None:
    seen: list[dict[str, Any]] = []

    class KwargsHook(CustomLogger):
        async def async_should_run_agentic_loop(self, **arguments: Any) -> tuple[bool, dict[str, Any]]:
            seen.append(arguments["kwargs"])
            return True, {}

        async def async_build_agentic_loop_plan(self, **arguments: Any) -> AgenticLoopPlan:
            depth = arguments["kwargs"]["_agentic_loop_depth"]
            patch = AgenticLoopRequestPatch(messages=arguments["messages"], kwargs={"round": depth})
            return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)

        async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan

    model = ScriptedModel(route.text("a"), route.text("b"), route.text("c"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[KwargsHook()], max_agentic_loops=2)) as client:
        await post(client, route, route.request())

    assert [k.get("round") for k in seen] == [None, 0, 1]
    assert [k["_agentic_loop_depth"] for k in seen] == [0, 1, 2]


async def test_post_hook_reshapes_the_reruns_answer_and_cleanup_runs_once_per_plan(route: Route) -> None:
    class Reshaping(ToolHook):
        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
            assert plan.metadata == {"from": "plan"}
            reshaped = dict(response)
            reshaped["reshaped_by"] = "post hook"
            return reshaped

        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_agentic_loop_plan(tools, **arguments)
            plan.metadata = {"from": "plan"}
            return plan

        async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments)
            plan.metadata = {"from": "plan"}
            return plan

    hook = Reshaping("lookup")
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.calls(("lookup", {"k": 2})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await post(client, route, route.request())

    body = response.json()
    assert body["reshaped_by"] == "post hook"
    assert route.final_text(body) == "done"
    assert int(response.headers["content-length"]) == len(response.content)
    assert len(hook.cleanups) == 2 and all(plan.metadata == {"from": "plan"} for plan in hook.cleanups)


async def test_a_duck_typed_hook_with_a_dict_plan(route: Route) -> None:
    class DuckHook:  # no base class at all
        async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> tuple[bool, dict[str, Any]]:
            return bool(response.choices or response.content), {}

        def plan(self, messages: list[Any], **_: Any) -> dict[str, Any]:
            follow_up = [*messages, {"role": "user", "content": "continue"}]
            return {"run_agentic_loop": True, "request_patch": {"messages": follow_up}, "metadata": {"duck": True}}

        async def async_build_agentic_loop_plan(self, **arguments: Any) -> dict[str, Any]:
            return self.plan(**arguments)

        async def async_build_chat_completion_agentic_loop_plan(self, **arguments: Any) -> dict[str, Any]:
            return self.plan(**arguments)

    model = ScriptedModel(route.text("one"), route.text("two"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[DuckHook()], max_agentic_loops=1)) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == "two"
    assert model.requests[1].body["messages"][-1] == {"role": "user", "content": "continue"}


@pytest.mark.parametrize(
    ("plan", "detail"),
    [
        (RuntimeError("tool backend down"), "RuntimeError: tool backend down"),
        ("not a plan", "returned str, not a plan"),
        (AgenticLoopPlan(run_agentic_loop=True), "without request_patch.messages"),
        ({"run_agentic_loop": True, "bogus": 1}, "unknown fields ['bogus']"),
        (AgenticLoopPlan(response_override="text"), "response_override is str"),
    ],
)
async def test_a_failing_hook_gives_a_500_in_the_routes_error_shape(
    route: Route, plan: Any, detail: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(CustomLogger):
        async def async_should_run_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
            return True, {"tool_calls": []}

        async def async_build_agentic_loop_plan(self, **_: Any) -> Any:
            if isinstance(plan, Exception):
                raise plan
            return plan

        async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan

    model = ScriptedModel(route.calls(("lookup", {"k": 1})))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Failing()])) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 500
    kind, text = route.error(response.json())
    assert kind == ("api_error" if route.name == "messages" else "server_error")
    assert "Failing" in text and detail in text
    assert "lookup" not in response.text  # never the tool call the client did not ask for
    assert any("Failing" in record.getMessage() for record in caplog.records if record.levelname == "ERROR")


async def test_a_failing_gate_and_a_gate_with_a_bad_answer_are_hook_errors(route: Route) -> None:
    class BadGate(CustomLogger):
        async def async_should_run_agentic_loop(self, **_: Any) -> Any:
            return True

    model = ScriptedModel(route.text("x"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[BadGate()])) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 500
    assert "BadGate.async_should_run_agentic_loop" in route.error(response.json())[1]


async def test_cleanup_runs_when_the_rerun_fails(route: Route) -> None:
    class Crashing(ToolHook):
        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
            raise ValueError("post failed")

    hook = Crashing("lookup")
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 500
    assert "post failed" in route.error(response.json())[1]
    assert len(hook.cleanups) == 1


async def test_post_hooks_shape_the_final_answer_innermost_first(route: Route) -> None:
    """As in LiteLLM's nested follow-ups: every executed plan's post hook sees the final answer."""
    order: list[int] = []

    class Marking(ToolHook):
        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
            depth = kwargs["_agentic_loop_depth"]
            order.append(depth)
            marked = copy.deepcopy(response)  # a new object, as LiteLLM hooks often return
            marked[f"seen_by_round_{depth}"] = route.final_text(response)
            return marked

    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.calls(("lookup", {"k": 2})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Marking()])) as client:
        response = await post(client, route, route.request())

    body = response.json()
    assert order == [1, 0]
    assert body["seen_by_round_0"] == body["seen_by_round_1"] == "done"
    assert int(response.headers["content-length"]) == len(response.content)


async def test_patch_fields_given_as_none_are_read_as_empty(route: Route) -> None:
    def plan(arguments: dict[str, Any]) -> AgenticLoopPlan:
        patch = AgenticLoopRequestPatch(messages=arguments["messages"], optional_params=None, kwargs=None)  # type: ignore[arg-type]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch, metadata=None)  # type: ignore[arg-type]

    model = ScriptedModel(route.text("one"), route.text("two"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[PlanHook(plan)], max_agentic_loops=1)) as client:
        response = await post(client, route, route.request())
    assert route.final_text(response.json()) == "two"


@pytest.mark.parametrize(
    ("plan", "detail"),
    [
        (
            AgenticLoopPlan(
                run_agentic_loop=True,
                request_patch=AgenticLoopRequestPatch(messages=[], optional_params={"blob": b"\x00"}),
            ),
            "the patched request is not JSON",
        ),
        (AgenticLoopPlan(response_override={"ids": {1, 2}}), "response_override is not JSON"),
    ],
)
async def test_values_that_are_not_json_are_hook_errors(route: Route, plan: Any, detail: str) -> None:
    model = ScriptedModel(route.text("x"), route.text("y"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[PlanHook(plan)])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    assert detail in route.error(response.json())[1]


async def test_tool_calls_with_odd_names_do_not_break_the_fingerprint() -> None:
    route = Route("messages")
    odd = route.calls(("lookup", {"k": 1}))
    odd["content"].append({"type": "tool_use", "id": "t2", "name": 7, "input": None})
    model = ScriptedModel(odd, route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 200


async def test_chat_falls_back_to_the_messages_style_plan_builder_as_litellm_does() -> None:
    route = Route("chat")
    seen: list[dict[str, Any]] = []

    class MessagesStyle(CustomLogger):
        async def async_should_run_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
            return True, {}

        async def async_build_agentic_loop_plan(self, **arguments: Any) -> AgenticLoopPlan:
            seen.append(arguments)
            return AgenticLoopPlan(response_override=route.text("built by the messages-style builder"))

    model = ScriptedModel(route.text("x"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[MessagesStyle()])) as client:
        response = await post(client, route, route.request(temperature=1))
    assert route.final_text(response.json()) == "built by the messages-style builder"
    assert seen[0]["anthropic_messages_optional_request_params"] == {"temperature": 1}
    assert seen[0]["kwargs"]["_agentic_loop_api_surface"] == "chat_completions"


async def test_request_hooks_change_the_first_request_in_hook_order(route: Route) -> None:
    class AddTool(CustomLogger):
        def __init__(self, name: str) -> None:
            self.name = name
            self.seen: list[Any] = []

        async def async_pre_agentic_loop_request_hook(self, request: Any, logging_obj: Any, kwargs: Any) -> Any:
            self.seen.append((request, logging_obj.litellm_call_id, kwargs["_agentic_loop_depth"]))
            return {**request, "tools": [*request.get("tools", []), {"name": self.name}], "_agentic_x": 1}

    first, second = AddTool("first"), AddTool("second")
    model = ScriptedModel(route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[first, second])) as client:
        await post(client, route, route.request())

    sent = model.requests[0]
    assert sent.body["tools"] == [{"name": "first"}, {"name": "second"}]
    assert "_agentic_x" not in sent.body
    assert int(sent.headers["content-length"]) == len(sent.raw)
    assert second.seen[0][0]["tools"] == [{"name": "first"}]
    assert first.seen[0][2] == 0


async def test_a_request_hooks_edit_in_place_with_none_returned_reaches_the_first_call(route: Route) -> None:
    """A request hook that edits the request in place and returns None (as LiteLLM's hooks often do): the first
    call of the app gets the edited body, the one the gates are given, not the client's bytes; a hook that reads
    and edits nothing leaves the client's bytes as they came."""

    class InPlace(CustomLogger):
        async def async_pre_agentic_loop_request_hook(self, request: Any, logging_obj: Any, kwargs: Any) -> Any:
            request["temperature"] = 0.25
            request["messages"][0]["content"] = "edited"
            return None

    class Reader(CustomLogger):
        async def async_pre_agentic_loop_request_hook(self, request: Any, logging_obj: Any, kwargs: Any) -> Any:
            assert request["messages"]
            return None

    model = ScriptedModel(route.text("done"), route.text("done"), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Reader(), InPlace()])) as client:
        await post(client, route, route.request())
    sent = model.requests[0]
    assert sent.body["temperature"] == 0.25 and sent.body["messages"][0]["content"] == "edited"
    assert int(sent.headers["content-length"]) == len(sent.raw)
    async with http_client(AgenticLoopMiddleware(model, hooks=[Reader()])) as client:
        raw = b'{"model": "m",  "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}'
        await client.post(route.path, content=raw, headers={"content-type": "application/json"})
    assert model.requests[1].raw == raw  # byte for byte: spaces and all
    # As the SDKs write a request (compact, UTF-8 unescaped), told untouched by one write: the same bytes go up.
    compact = '{"model":"m","max_tokens":9,"temperature":0.5,"messages":[{"role":"user","content":"héllo 😀"}]}'
    async with http_client(AgenticLoopMiddleware(model, hooks=[Reader()])) as client:
        await client.post(route.path, content=compact.encode(), headers={"content-type": "application/json"})
    assert model.requests[2].raw == compact.encode()


async def test_a_request_hook_that_returns_no_body_is_a_hook_error(route: Route) -> None:
    class Bad(CustomLogger):
        async def async_pre_agentic_loop_request_hook(self, **_: Any) -> Any:
            return ["not", "a", "body"]

    model = ScriptedModel(route.text("never sent"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Bad()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    assert "Bad.async_pre_agentic_loop_request_hook" in route.error(response.json())[1]
    assert model.requests == []


async def test_a_request_hooks_body_with_a_name_that_is_not_a_string_is_a_hook_error(route: Route) -> None:
    """A name JSON cannot have is no internal field: the body is refused as not JSON, naming the hook (it was an
    internal AttributeError, the internal fields' check calling `startswith` on it)."""

    class Bad(CustomLogger):
        async def async_pre_agentic_loop_request_hook(self, request: Any, **_: Any) -> Any:
            return {**request, 1: "one"}

    model = ScriptedModel(route.text("never sent"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Bad()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    message = route.error(response.json())[1]
    assert "Bad.async_pre_agentic_loop_request_hook" in message and "not JSON" in message
    assert model.requests == []


async def test_a_cancellation_raised_inside_a_hook_is_a_hook_error(route: Route) -> None:
    class Cancelling(CustomLogger):
        async def async_should_run_agentic_loop(self, **_: Any) -> Any:
            inner = asyncio.ensure_future(asyncio.sleep(10))
            inner.cancel()
            await inner  # raises CancelledError though nobody cancelled the request

    model = ScriptedModel(route.text("x"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Cancelling()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    assert "CancelledError raised inside the hook" in route.error(response.json())[1]
