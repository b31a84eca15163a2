"""A live Responses stream's keep-alives are events, not only comments: Codex resets its idle timer on events
alone. Each is a repeated `response.in_progress` numbered in its place, which the openai SDK's stream helper and
the Agents SDK take in their stride (issue 23, item 1). Under uvicorn, with a tool that runs until the test has
seen keep-alives arrive (no sleeping thresholds)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import openai
from openai.types.responses import Response
from servers import serving
from streams import event_stream
from support import gated_lookup

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.testing import ScriptedModel, function_call, response

KEEPALIVES = 3  # repeated `response.in_progress` events the client must see while the tool runs
INSTRUCTIONS = "Be helpful. " * 1700  # ~20 KB, as a coding agent's system prompt


def gated_app() -> tuple[Any, asyncio.Event, list[str]]:
    """A loop whose tool runs until `release` is set; a first round that says something, then calls it."""
    slow_lookup, release, runs = gated_lookup()

    first = response("Let me look.", function_call("slow_lookup", {"key": "k"}))
    # The request echoed, as the API's response.created does: a keep-alive must not repeat it every few seconds.
    first["instructions"] = INSTRUCTIONS
    first["tools"] = [
        {"type": "function", "name": f"tool_{n}", "parameters": {"type": "object"}, "strict": False} for n in range(10)
    ]
    model = ScriptedModel(
        event_stream(list(sse.responses_events(first))),
        event_stream(list(sse.responses_events(response("It is v.")))),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([slow_lookup], timeout=30)], stream_keepalive=0.02)
    return app, release, runs


async def test_the_openai_stream_helper_gets_keepalive_events_and_accumulates_the_turn() -> None:
    app, release, runs = gated_app()
    kinds: list[str] = []
    numbers: list[int] = []
    lifecycle_ids: list[str] = []
    keepalive_sizes: list[int] = []
    async with contextlib.AsyncExitStack() as stack, serving("uvicorn", app) as server, asyncio.timeout(20):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k", max_retries=0)
        await stack.enter_async_context(client)
        async with client.responses.stream(model="m", input="go") as stream:
            async for event in stream:
                kinds.append(event.type)
                numbers.append(event.sequence_number)
                if event.type.startswith("response.") and hasattr(event, "response"):
                    lifecycle_ids.append(event.response.id)
                if event.type == "response.in_progress" and kinds.count("response.in_progress") > 1:
                    keepalive_sizes.append(len(event.to_json(indent=None)))
                    Response.model_validate(event.response.to_dict())  # what the SDK's type requires is there
                if event.type == "response.in_progress" and runs and kinds.count("response.in_progress") > KEEPALIVES:
                    release.set()  # the keep-alives reached the client as events while the tool ran
            final = await stream.get_final_response()
    assert release.is_set() and runs == ["k"]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert numbers == list(range(len(numbers)))  # each keep-alive numbered in its place
    assert final.output_text == "Let me look.It is v."
    assert [item.type for item in final.output] == ["message", "message"]
    assert set(lifecycle_ids) == {final.id}  # every keep-alive names the client's response
    assert keepalive_sizes and max(keepalive_sizes) < 400  # not the 20 KB of instructions and tools again


async def test_the_agents_sdk_gets_keepalive_events_and_the_final_output() -> None:
    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner

    app, release, runs = gated_app()
    kinds: list[str] = []
    async with contextlib.AsyncExitStack() as stack, serving("uvicorn", app) as server, asyncio.timeout(20):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k", max_retries=0)
        await stack.enter_async_context(client)
        agent = Agent(name="helper", instructions="help", model=OpenAIResponsesModel("m", client))
        result = Runner.run_streamed(agent, "go", run_config=RunConfig(tracing_disabled=True))
        async for event in result.stream_events():
            if event.type != "raw_response_event":
                continue
            kinds.append(event.data.type)
            if event.data.type == "response.in_progress" and runs and kinds.count("response.in_progress") > KEEPALIVES:
                release.set()
    assert release.is_set() and runs == ["k"]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    assert result.final_output == "It is v."  # the Agents SDK's final output: the last message's text
