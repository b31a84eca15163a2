"""A real closing answer at the limit or on a repeated call: one more call of the app with tools off, in which the
claimed calls are answered with why they did not run; or, as an option, an immediate end with a short text."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import anthropic_client, http_client, openai_client
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider
from starlette.responses import StreamingResponse
from support import Route, post

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, CustomLogger, ServerTools, server_tool, sse
from agentic_middleware.testing import RecordedRequest, ScriptedModel, chat_completion, function_call, message, response

CLOSING = "Here is what I found so far."


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


@server_tool
def lookup(n: int) -> str:
    """Look a number up."""
    return f"entry {n}"


def tools_off(request: RecordedRequest) -> bool:
    choice = request.body.get("tool_choice")
    return choice == "none" or choice == {"type": "none"}


def eager(route: Route, same: bool = False) -> ScriptedModel:
    """A model that calls `lookup` whenever tools are on (a new input each time unless `same`), else answers."""
    counter = itertools.count(1)

    def reply(request: RecordedRequest) -> Any:
        if tools_off(request):
            return route.text(CLOSING)
        return route.calls(("lookup", {"n": 1 if same else next(counter)}))

    return ScriptedModel(default=reply)


def tool_results(route: Route, request: RecordedRequest) -> list[tuple[str, bool]]:
    """The results answering the last assistant turn of a request, with whether each is marked as an error."""
    history = request.body["messages"]
    if route.name == "messages":
        return [(block["content"], block.get("is_error", False)) for block in history[-1]["content"]]
    results = list(itertools.takewhile(lambda m: m["role"] == "tool", reversed(history)))
    return [(m["content"], m["content"].startswith("Error: ")) for m in reversed(results)]


async def test_at_the_limit_one_closing_call_with_tools_off_answers_in_words(route: Route) -> None:
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=2)
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    body = response.json()
    assert route.final_text(body) == CLOSING and route.tool_names(body) == []
    assert route.stop(body) == ("end_turn" if route.name == "messages" else "stop")
    assert len(model.requests) == 4  # the first call, 2 reruns, 1 closing call
    assert [tools_off(request) for request in model.requests] == [False, False, False, True]
    closing = model.requests[-1]
    assert closing.body["tool_choice"] == ({"type": "none"} if route.name == "messages" else "none")
    assert closing.body["tools"] == model.requests[0].body["tools"]  # declared still, for the history's calls
    [(text, is_error)] = tool_results(route, closing)
    assert is_error and "not run" in text.lower() and "max_agentic_loops=2" in text
    assert response.headers["x-agentic-loop-ended-by"] == "limit"
    assert response.headers["x-agentic-loop-reruns"] == "3"
    usage = body["usage"]
    counted = [call.get("input_tokens", call.get("prompt_tokens")) for call in usage["iterations"]]
    assert counted == [10, 10, 10, 10]  # the closing call's usage counts too
    assert usage.get("input_tokens", usage.get("prompt_tokens")) == (40 if route.name == "messages" else 10)


async def test_a_repeated_call_is_answered_with_its_earlier_result(route: Route) -> None:
    model = eager(route, same=True)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == CLOSING
    assert len(model.requests) == 3  # the call, its rerun, the closing call
    [(text, is_error)] = tool_results(route, model.requests[-1])
    assert is_error and "already ran" in text and "entry 1" in text
    assert response.headers["x-agentic-loop-ended-by"] == "repeated_tool_calls"


async def test_the_immediate_end_is_an_option_and_never_empty(route: Route) -> None:
    model = eager(route)
    app = AgenticLoopMiddleware(
        model, hooks=[ServerTools([lookup])], max_agentic_loops=1, closing="text", closing_text="Stopped here."
    )
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert len(model.requests) == 2
    assert route.final_text(response.json()) == "Stopped here."


async def test_a_model_that_calls_tools_anyway_in_the_closing_call_gets_no_second_one(route: Route) -> None:
    model = ScriptedModel(default=lambda request: route.calls(("lookup", {"n": len(model.requests)})))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1)
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert len(model.requests) == 3
    body = response.json()
    assert route.tool_names(body) == [] and route.final_text(body)  # the closing text, never empty
    assert response.headers["x-agentic-loop-ended-by"] == "limit"


EMPTY_CLOSINGS = {
    "messages": [message(), message(""), message({"type": "thinking", "thinking": "hmm", "signature": "s"})],
    "chat": [chat_completion(None), chat_completion("")],
}


async def test_an_empty_closing_answer_gets_the_closing_text(route: Route) -> None:
    for empty in EMPTY_CLOSINGS[route.name]:
        calls = itertools.count(1)
        model = ScriptedModel(
            default=lambda request: (
                empty if tools_off(request) else route.calls(("lookup", {"n": next(calls)}))  # noqa: B023
            )
        )
        app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1, closing_text="Ended.")
        async with http_client(app) as client:
            response = await post(client, route, route.request())
        assert len(model.requests) == 3
        body = response.json()
        assert route.final_text(body) == "Ended." and route.tool_names(body) == []
        if route.name == "messages":
            assert [block["type"] for block in body["content"]][-1] == "text"
            assert all(block.get("text", "x") for block in body["content"])  # no empty text block left


EMPTY_MESSAGE = {"type": "message", "id": "msg_e", "role": "assistant", "status": "completed", "content": []}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("empty", [(), ("",), (EMPTY_MESSAGE,)], ids=["no-item", "empty-text", "no-content"])
async def test_an_empty_responses_closing_answer_gets_the_closing_text(empty: tuple[Any, ...], stream: bool) -> None:
    def reply(request: RecordedRequest) -> Any:
        closing = tools_off(request)
        body = response(*empty) if closing else response(function_call("lookup", {"n": len(model.requests)}))
        if request.body.get("stream"):
            return StreamingResponse(iter(list(sse.responses_events(body))), media_type="text/event-stream")
        return body

    model = ScriptedModel(default=reply)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1, closing_text="Ended.")
    client = openai_client(app)
    if stream:
        async with client.responses.stream(model="m", input="hi") as events:
            answer = await events.get_final_response()
    else:
        answer = await client.responses.create(model="m", input="hi")

    assert len(model.requests) == 3
    assert answer.output_text == "Ended."
    assert answer.output[-1].type == "message" and [item.type for item in answer.output] == ["message"] * len(
        answer.output
    )


def test_closing_options_are_checked_at_start() -> None:
    with pytest.raises(ConfigurationError, match="closing must be"):
        AgenticLoopMiddleware(ScriptedModel(), closing="maybe")
    with pytest.raises(ConfigurationError, match="closing_text"):
        AgenticLoopMiddleware(ScriptedModel(), closing_text="")


async def test_the_official_sdks_get_words_at_the_limit(route: Route) -> None:
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1)
    if route.name == "messages":
        reply = await anthropic_client(app).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
        )
        assert [block.type for block in reply.content] == ["text"] and reply.stop_reason == "end_turn"
    else:
        completion = await openai_client(app).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}]
        )
        assert completion.choices[0].message.content == CLOSING


class Gutting(ServerTools):
    """Claims its calls as ServerTools does, then empties the answer it was shown, in place."""

    async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        claim = await super().async_should_run_agentic_loop(response, **arguments)
        if not claim[0]:
            pass
        elif "content" in response:
            response["content"].clear()
        else:
            response["choices"][0]["message"]["tool_calls"].clear()
        return claim


async def test_the_closing_call_is_built_from_the_answer_as_the_app_sent_it_not_as_a_gate_left_it(
    route: Route,
) -> None:
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[Gutting([lookup])], max_agentic_loops=1)
    question: Any = [{"role": "user", "content": "go"}]
    if route.name == "messages":
        reply = await anthropic_client(app).messages.create(model="m", max_tokens=10, messages=question)
        text = "".join(block.text for block in reply.content if block.type == "text")
    else:
        completion = await openai_client(app).chat.completions.create(model="m", messages=question)
        text = completion.choices[0].message.content or ""

    assert text == CLOSING  # the model's words from the closing call, not the closing_text of an emptied answer
    assert [tools_off(request) for request in model.requests] == [False, False, True]
    [(result, is_error)] = tool_results(route, model.requests[-1])
    assert is_error and "max_agentic_loops=1" in result


def check_messages_history(history: list[dict[str, Any]]) -> None:
    """Anthropic's rules for a request's history: roles alternate from the user, only the last may be empty."""
    assert history[0]["role"] == "user"
    for before, after in itertools.pairwise(history):
        assert before["role"] != after["role"]
    for turn in history[:-1]:
        assert turn["content"], turn


def check_chat_history(history: list[dict[str, Any]]) -> None:
    for turn in history:
        if turn["role"] == "assistant" and not turn.get("tool_calls"):
            assert isinstance(turn["content"], str) and turn["content"], turn


async def test_pydantic_ai_gets_the_closing_answer_and_its_next_request_is_valid(route: Route) -> None:
    """pydantic-ai rejects an empty answer (retrying first); with its Anthropic and OpenAI models it gets words."""
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1)
    if route.name == "messages":
        agent: Agent[None, str] = Agent(
            AnthropicModel("claude-test", provider=AnthropicProvider(anthropic_client=anthropic_client(app)))
        )
    else:
        agent = Agent(OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=openai_client(app))))

    result = await agent.run("What is entry 1?")
    assert result.output == CLOSING
    assert len(model.requests) == 3

    await agent.run("And entry 2?", message_history=result.all_messages())
    following = model.requests[3].body["messages"]
    if route.name == "messages":
        check_messages_history(following)
        assert {"type": "text", "text": CLOSING} in following[1]["content"]
    else:
        check_chat_history(following)
        assert any(turn.get("content") == CLOSING for turn in following if turn["role"] == "assistant")


async def test_responses_gets_a_closing_answer_too() -> None:
    counter = itertools.count(1)

    def reply(request: RecordedRequest) -> Any:
        if tools_off(request):
            return response(CLOSING)
        return response(function_call("lookup", {"n": next(counter)}))

    model = ScriptedModel(default=reply)
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1))
    result = await client.responses.create(model="gpt-test", input="What is entry 1?")

    assert result.output_text == CLOSING
    assert len(model.requests) == 3
    closing = model.requests[-1].body
    assert closing["tool_choice"] == "none"
    last = closing["input"][-1]
    assert last["type"] == "function_call_output" and "max_agentic_loops=1" in last["output"]
    assert last["call_id"] == closing["input"][-2]["call_id"]


async def test_responses_immediate_end_has_a_message() -> None:
    model = ScriptedModel(default=lambda request: response(function_call("lookup", {"n": len(model.requests)})))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1, closing="text")
    result = await openai_client(app).responses.create(model="gpt-test", input="go")
    assert result.output_text == "I stopped here: the server's tools could not run again for this request."


@pytest.mark.parametrize("surface", ["chat", "responses"])
async def test_the_agents_sdk_gets_a_final_output_at_the_limit(surface: str) -> None:
    """The OpenAI Agents SDK took the empty end of turn as `final_output == ''`."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    if surface == "chat":
        model = eager(Route("chat"))
    else:
        counter = itertools.count(1)
        model = ScriptedModel(
            default=lambda request: (
                response(CLOSING) if tools_off(request) else response(function_call("lookup", {"n": next(counter)}))
            )
        )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1))
    kind = agents.OpenAIChatCompletionsModel if surface == "chat" else agents.OpenAIResponsesModel
    agent = agents.Agent(name="a", instructions="Answer.", model=kind(model="gpt-test", openai_client=client))

    result = await agents.Runner.run(agent, "What is entry 1?")

    assert result.final_output == CLOSING
    assert len(model.requests) == 3


class LimitInApp:
    """A model app that sets `request.state.max_agentic_loops` while it answers (as a dependency of its route may)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["max_agentic_loops"] = self.limit
        await self.app(scope, receive, send)


async def test_a_limit_of_0_set_during_the_first_call_keeps_the_servers_calls_from_the_client(route: Route) -> None:
    model = eager(route)
    app = AgenticLoopMiddleware(LimitInApp(model, 0), hooks=[ServerTools([lookup])], closing_text="Ended.")
    async with http_client(app) as client:
        response = await post(client, route, route.request())
    assert len(model.requests) == 1  # a limit of 0: no other model call, not even the closing one
    body = response.json()
    assert route.tool_names(body) == [] and route.final_text(body) == "Ended."
    assert response.headers["x-agentic-loop-ended-by"] == "limit"


class ZeroFromThePlan:
    """Runs the first rerun with `max_agentic_loops=0` in its patch kwargs."""

    async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> tuple[bool, dict[str, Any]]:
        calls = [block for block in response["content"] if block["type"] == "tool_use"]
        return bool(calls), {"tool_calls": calls}

    async def async_build_agentic_loop_plan(self, messages: Any, response: Any, **_: Any) -> Any:
        from agentic_middleware import AgenticLoopPlan, AgenticLoopRequestPatch

        [call] = [block for block in response["content"] if block["type"] == "tool_use"]
        history = [
            *messages,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]},
        ]
        patch = AgenticLoopRequestPatch(messages=history, kwargs={"max_agentic_loops": 0})
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)


async def test_a_limit_of_0_from_a_plan_ends_without_a_closing_call() -> None:
    route = Route("messages")
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[ZeroFromThePlan()], closing_text="Ended.")
    async with http_client(app) as client:
        response = await post(client, route, route.request())
    assert len(model.requests) == 2  # the first call and the plan's rerun
    body = response.json()
    assert route.tool_names(body) == [] and route.final_text(body) == "Ended."


class Emptying(CustomLogger):
    """A gate that empties the answer it was shown, in place, and declines: LiteLLM lets hooks edit `response`."""

    async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        for key in ("content", "choices", "output"):
            if key in response:
                response[key].clear()
        return False, {}


async def test_a_gate_that_empties_its_answer_and_declines_hides_no_call_from_the_hooks_after_it(
    route: Route,
) -> None:
    """Each gate is shown the answer as the app sent it: the server's call is still claimed, and never reaches the
    client, however an earlier gate left its own `response`; the post hooks get the answer as sent too."""
    model = eager(route)
    app = AgenticLoopMiddleware(model, hooks=[Emptying(), ServerTools([lookup])], max_agentic_loops=1)
    question: Any = [{"role": "user", "content": "go"}]
    if route.name == "messages":
        reply = await anthropic_client(app).messages.create(model="m", max_tokens=10, messages=question)
        assert [block.type for block in reply.content] == ["text"]
        text = reply.content[0].text  # type: ignore[union-attr]
    else:
        completion = await openai_client(app).chat.completions.create(model="m", messages=question)
        assert completion.choices[0].message.tool_calls is None
        text = completion.choices[0].message.content or ""

    assert text == CLOSING
    assert [tools_off(request) for request in model.requests] == [False, False, True]


class Rewriting(ServerTools):
    """Claims its calls, then rewrites their input in place in the answer it was shown (always to the same)."""

    async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        claim = await super().async_should_run_agentic_loop(response, **arguments)
        for block in response.get("content") or []:
            if block.get("type") == "tool_use":
                block["input"]["n"] = 99
        for call in (response.get("choices") or [{}])[0].get("message", {}).get("tool_calls") or []:
            call["function"]["arguments"] = '{"n": 99}'
        return claim


async def test_repeated_calls_are_the_models_not_what_a_gate_left_in_its_response(route: Route) -> None:
    model = eager(route)  # a new input each round
    app = AgenticLoopMiddleware(model, hooks=[Rewriting([lookup])], max_agentic_loops=3)
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    assert response.headers["x-agentic-loop-ended-by"] == "limit"  # not repeated_tool_calls after one rerun
    assert len(model.requests) == 5
