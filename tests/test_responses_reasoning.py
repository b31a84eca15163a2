"""Reasoning items and the calls they led to, when a round's calls are parallel and some are left out.

A reasoning model that calls tools in parallel sends one reasoning item, then several calls. The API pairs them
both ways: a reasoning item needs an item after it, and a stored call sent back with its id needs its reasoning
item. `PairingModel` refuses input that breaks either rule, as OpenAI does.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import openai_client
from starlette.responses import JSONResponse, StreamingResponse

from agentic_middleware import AgenticLoopMiddleware, sse
from agentic_middleware.testing import ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


CLIENT_TOOL = {"type": "function", "name": "client_fn", "parameters": {"type": "object", "properties": {}}}


class PairingModel:
    """A reasoning model calling `lookup` and `client_fn` in parallel (in `order`) until both have an output
    (`always_both`: both again every round until the client's has one). It refuses input as OpenAI does when a
    reasoning item has no following item or a call it sent comes back with its id but without its reasoning item."""

    def __init__(self, order: tuple[str, str], always_both: bool = False) -> None:
        self.order = order
        self.always_both = always_both
        self.numbers = itertools.count(1)
        self.reasoning_of: dict[str, str] = {}  # call item id -> the id of the reasoning item before it
        self.model = ScriptedModel(default=self.reply)

    def refusal(self, items: list[Any]) -> str | None:
        present = {item.get("id") for item in items}
        for position, item in enumerate(items):
            following = items[position + 1] if position + 1 < len(items) else {}
            if item.get("type") == "reasoning" and following.get("type") not in ("function_call", "message"):
                return f"Item '{item['id']}' of type 'reasoning' was provided without its required following item."
            needed = self.reasoning_of.get(item.get("id"))
            if needed is not None and needed not in present:
                return (
                    f"Item '{item['id']}' of type 'function_call' was provided without its required 'reasoning' "
                    f"item: '{needed}'."
                )
        return None

    def reply(self, request: Any) -> Any:
        body = request.body
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        problem = self.refusal(items)
        if problem:
            return JSONResponse({"error": {"message": problem, "type": "invalid_request_error"}}, 400)
        last_user = max(position for position, item in enumerate(items) if item.get("role") == "user")
        called = {item["call_id"]: item["name"] for item in items if item.get("type") == "function_call"}
        answered = {called.get(item["call_id"]) for item in items[last_user:] if "output" in item}
        again = self.always_both and "client_fn" not in answered
        n = next(self.numbers)
        names = [name for name in self.order if again or name not in answered]
        if not names:
            result = response("done")
        else:
            reasoning = {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": "t"}]}
            calls = [
                {**function_call(name, {"key": str(n)}, f"call_{n}_{name}"), "id": f"fc_{n}_{name}"} for name in names
            ]
            self.reasoning_of.update((call["id"], reasoning["id"]) for call in calls)
            result = response(reasoning, *calls)
        if body.get("stream"):
            return StreamingResponse(iter(list(sse.responses_events(result))), media_type="text/event-stream")
        return result


ORDERS = [("client_fn", "lookup"), ("lookup", "client_fn")]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_rerun_keeps_the_reasoning_of_the_server_call_next_to_the_clients(
    order: tuple[str, str], stream: bool
) -> None:
    model = PairingModel(order)
    client = openai_client(AgenticLoopMiddleware(model.model, hooks=[ServerTools([lookup])]))

    if stream:
        async with client.responses.stream(model="m", input="go", tools=[CLIENT_TOOL]) as events:
            result = await events.get_final_response()
    else:
        result = await client.responses.create(model="m", input="go", tools=[CLIENT_TOOL])

    rerun = model.model.requests[1].body["input"]
    assert [item.get("type") for item in rerun[1:]] == ["reasoning", "function_call", "function_call_output"]
    assert [(item.type, getattr(item, "name", None)) for item in result.output] == [
        ("reasoning", None),
        ("function_call", "client_fn"),
    ]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_refused_mixed_turn_gives_the_clients_call_with_its_reasoning_and_its_replay_works(
    order: tuple[str, str], stream: bool
) -> None:
    model = PairingModel(order, always_both=True)
    client = openai_client(AgenticLoopMiddleware(model.model, hooks=[ServerTools([lookup])], max_agentic_loops=1))
    history: list[Any] = [{"role": "user", "content": "go"}]

    if stream:
        async with client.responses.stream(model="m", input=history, tools=[CLIENT_TOOL]) as events:
            result = await events.get_final_response()
    else:
        result = await client.responses.create(model="m", input=history, tools=[CLIENT_TOOL])

    assert [(item.type, getattr(item, "name", None)) for item in result.output] == [
        ("reasoning", None),
        ("function_call", "client_fn"),
    ]
    # The client replays the turn statelessly, items with their ids, as the Agents SDK does by default.
    history += [item.model_dump(exclude_none=True) for item in result.output]
    history.append({"type": "function_call_output", "call_id": result.output[-1].call_id, "output": "42"})
    replayed = await client.responses.create(model="m", input=history, tools=[CLIENT_TOOL])
    assert replayed.output_text == "done"


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("limit", [None, 1])
async def test_the_agents_sdk_with_a_reasoning_model_calling_in_parallel(streamed: bool, limit: int | None) -> None:
    agents = pytest.importorskip("agents")
    from openai.types.shared import Reasoning

    agents.set_tracing_disabled(True)
    ran: list[str] = []

    @agents.function_tool
    def client_fn() -> str:
        """The client's tool."""
        ran.append("client_fn")
        return "42"

    # Under the cap the client's call comes first; at the cap (the second round) the server's, then a refusal.
    model = PairingModel(("client_fn", "lookup") if limit is None else ("lookup", "client_fn"), limit is not None)
    app = AgenticLoopMiddleware(model.model, hooks=[ServerTools([lookup])], max_agentic_loops=limit)
    agent = agents.Agent(
        name="a",
        tools=[client_fn],
        model=agents.OpenAIResponsesModel(model="gpt-test", openai_client=openai_client(app)),
        model_settings=agents.ModelSettings(reasoning=Reasoning(effort="low")),
    )

    if streamed:
        result = agents.Runner.run_streamed(agent, "go")
        async for _ in result.stream_events():
            pass
    else:
        result = await agents.Runner.run(agent, "go")

    assert result.final_output == "done"
    assert ran == ["client_fn"]
