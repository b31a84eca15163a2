"""Live Responses streams under uvicorn on 127.0.0.1, judged by the official openai SDK and the Agents SDK:
every round's text reaches the client as the app makes it, in one lifecycle, and server calls never do."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from starlette.responses import JSONResponse
from streams import LockStep, event_stream

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.testing import RecordedRequest, ScriptedModel, function_call, response

PREAMBLE = "pre0 pre1 pre2 "
TOKENS = "tok0 tok1 tok2 tok3 tok4 "


def usage(tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": tokens + 7,
    }


def reasoning(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{text}", "summary": [{"type": "summary_text", "text": text}]}


def events(body: dict[str, Any]) -> list[bytes]:
    return list(sse.responses_events(body, chunk_size=5))


async def test_every_rounds_text_streams_in_one_lifecycle() -> None:
    preamble_seen = asyncio.Event()
    released_by_client: list[bool] = []

    @server_tool
    async def lookup(key: str) -> str:
        """Finishes only once the client has the preamble (or after 5 s, which fails the test)."""
        try:
            await asyncio.wait_for(preamble_seen.wait(), 5)
            released_by_client.append(True)
        except TimeoutError:
            released_by_client.append(False)
        return f"value of {key}"

    first = response(PREAMBLE, reasoning("why"), function_call("lookup", {"key": "k"}), usage=usage(30))
    last = response(TOKENS, usage=usage(40))
    final_round = LockStep(b'"delta":"tok')
    model = ScriptedModel(event_stream(events(first)), lambda request: event_stream(final_round.events(events(last))))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    kinds: list[str] = []
    numbers: list[int] = []
    async with serving(app) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        async with client.responses.stream(model="m", input="go") as stream:
            async for event in stream:
                kinds.append(event.type)
                numbers.append(event.sequence_number)
                if event.type == "response.output_text.delta":
                    if "pre2" in event.snapshot:
                        preamble_seen.set()
                    if "tok" in event.snapshot:
                        final_round.saw()
            final = await stream.get_final_response()

    assert released_by_client == [True]  # the preamble reached the client while the tool still ran
    assert final_round.in_step and len(final_round.waits) == 4  # each token arrived before the app made the next
    assert [item.type for item in final.output] == ["message", "message"]  # no call, no reasoning that led to it
    assert [item.content[0].text for item in final.output] == [PREAMBLE, TOKENS]  # type: ignore[union-attr]
    assert final.id == first["id"]
    assert final.usage is not None and (final.usage.input_tokens, final.usage.total_tokens) == (40, 47)  # the last call
    assert sum(call["total_tokens"] for call in final.usage.model_extra["iterations"]) == 84  # type: ignore[index]
    assert kinds.count("response.created") == kinds.count("response.completed") == 1
    assert numbers == sorted(set(numbers))
    assert [request.body["stream"] for request in model.requests] == [True, True]


async def test_a_failure_mid_stream_is_the_same_lifecycles_failed_response() -> None:
    model = ScriptedModel(
        event_stream(events(response(PREAMBLE, function_call("lookup", {"key": "k"})))),
        JSONResponse({"error": {"message": "model down", "type": "server_error", "code": None}}, 503),
    )

    @server_tool
    async def lookup(key: str) -> str:
        """Look up."""
        return key

    # No retries of the 503: the failure's shape is judged here (retries: tests/test_rerun_retries.py).
    async with serving(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], rerun_retries=0)) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        received = []
        with pytest.raises(openai.APIError, match="model down"):  # the `error` event after `response.failed`
            async for event in await client.responses.create(model="m", input="go", stream=True):
                received.append(event)

    kinds = [event.type for event in received]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.failed"
    failed = received[-1]
    assert failed.type == "response.failed"
    assert failed.response.id == received[0].response.id  # type: ignore[union-attr]
    assert failed.response.error is not None and "model down" in failed.response.error.message


@pytest.mark.parametrize("streamed", [True])
async def test_the_agents_sdk_streams_a_live_run_with_a_client_tool(streamed: bool) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    @server_tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    def script(request: RecordedRequest) -> Any:
        items = request.body["input"]
        outputs = {item["call_id"]: item["output"] for item in items if item.get("type") == "function_call_output"}
        if "call_weather" in outputs:
            body = response(f"It is {outputs['call_weather']}.")
        elif "call_lookup" in outputs:
            body = response(function_call("get_weather", {"city": outputs["call_lookup"]}, "call_weather"))
        else:
            body = response("Looking.", function_call("lookup", {"key": "home"}, "call_lookup"))
        return event_stream(events(body)) if request.body.get("stream") else body

    model = ScriptedModel(default=script)
    async with serving(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        agent = agents.Agent(
            name="weather",
            tools=[get_weather],
            model=agents.OpenAIResponsesModel(model="gpt-test", openai_client=client),
        )
        result = agents.Runner.run_streamed(agent, "Weather at home?")
        [event async for event in result.stream_events()]

    assert result.final_output == "It is sunny in value of home."
    assert all(request.body.get("stream") is True for request in model.requests)
