"""How a Responses turn ends when the loop may not rerun, and calls the app sent without a `call_id`."""

from __future__ import annotations

import itertools
from typing import Any

import openai
import pytest
from conftest import http_client, openai_client
from starlette.responses import JSONResponse, StreamingResponse
from storing import StoringModel

from agentic_middleware import AgenticLoopMiddleware, sse
from agentic_middleware.closing import DEFAULT_CLOSING_TEXT
from agentic_middleware.testing import ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


CLIENT_TOOL = {"type": "function", "name": "client_fn", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("end", ["repeat", "cap"])
async def test_a_refused_mixed_turn_gives_the_clients_call_and_no_made_up_message(end: str) -> None:
    keys = itertools.count()

    def mixed(request: Any) -> dict[str, Any]:
        key = "same" if end == "repeat" else str(next(keys))
        return response(function_call("lookup", {"key": key}, "call_s"), function_call("client_fn", {}, "call_c"))

    model = ScriptedModel(default=mixed)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1)

    turn = await openai_client(app).responses.create(model="m", input="x", tools=[CLIENT_TOOL])

    assert [(item.type, getattr(item, "name", None)) for item in turn.output] == [("function_call", "client_fn")]
    assert DEFAULT_CLOSING_TEXT not in turn.output_text
    assert turn.output_text == ""


async def test_a_call_without_a_call_id_gets_one_in_the_item_and_its_output() -> None:
    call = function_call("lookup", {"key": "a"})
    del call["call_id"]
    model = ScriptedModel(response(call), response("done"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))

    result = await client.responses.create(model="m", input="x")

    assert result.output_text == "done"
    item, output = model.requests[1].body["input"][1:]
    assert item["type"] == "function_call" and isinstance(item["call_id"], str) and item["call_id"]
    assert output == {"type": "function_call_output", "call_id": item["call_id"], "output": "value of a"}


def streamed(body: dict[str, Any]) -> Any:
    """A scripted reply that streams `body` when the request asks for a stream, as a Responses server does."""

    def reply(request: Any) -> Any:
        if not request.body.get("stream"):
            return body
        return StreamingResponse(iter(list(sse.responses_events(body))), media_type="text/event-stream")

    return reply


async def test_a_live_stream_is_one_lifecycle_without_the_claimed_call() -> None:
    model = ScriptedModel(
        streamed(response("Let me look.", function_call("lookup", {"key": "k"}, "call_s"))),
        streamed(response("It is v.")),
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))

    async with client.responses.stream(model="m", input="x") as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()

    assert [request.body.get("stream") for request in model.requests] == [True, True]
    kinds = [event.type for event in events]
    assert kinds.count("response.created") == kinds.count("response.in_progress") == 1
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added = [event for event in events if event.type == "response.output_item.added"]
    assert [(event.output_index, event.item.type) for event in added] == [(0, "message"), (1, "message")]
    assert not any("function_call" in event.type for event in events)
    assert [item.type for item in final.output] == ["message", "message"]
    assert final.output_text == "Let me look.It is v."
    assert final.id == events[0].response.id  # type: ignore[union-attr]


async def test_a_first_call_error_keeps_its_status_on_a_stream() -> None:
    limited = {"error": {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
    model = ScriptedModel(JSONResponse(limited, 429, headers={"retry-after": "7"}))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))

    with pytest.raises(openai.RateLimitError) as raised:
        async with client.responses.stream(model="m", input="x") as stream:
            await stream.get_final_response()

    assert raised.value.response.headers["retry-after"] == "7"
    assert model.requests[0].body["stream"] is True


@pytest.mark.parametrize("streaming", [None, "buffered"])
async def test_a_failure_after_the_stream_began_is_an_api_error_of_the_sdk(streaming: str | None) -> None:
    down = {"error": {"message": "model down", "type": "server_error", "param": None, "code": None}}
    model = ScriptedModel(
        streamed(response("Let me look.", function_call("lookup", {"key": "k"}))), JSONResponse(down, 503)
    )
    # No retries: the 503's shape is judged here (retries: tests/test_rerun_retries.py).
    client = openai_client(
        AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], streaming=streaming, rerun_retries=0)
    )
    kinds = []

    with pytest.raises(openai.APIError) as raised:
        async with client.responses.stream(model="m", input="x") as stream:
            async for event in stream:
                kinds.append(event.type)

    assert raised.value.message == "model down"
    assert kinds[0] == "response.created" and kinds[-1] == "response.failed"
    assert kinds.count("response.created") == 1


@pytest.mark.parametrize("end", ["answer", "cap", "repeat"])
async def test_a_follow_up_by_previous_response_id_works_on_a_store_that_checks_tool_outputs(end: str) -> None:
    keys = itertools.count()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("previous_response_id"):
            return response("Follow-up answered.")
        if body.get("tool_choice") == "none":  # the closing call: tools off
            return response("What I have.")
        if end == "answer" and isinstance(body["input"], list):
            return response("The value is v.")
        key = "same" if end == "repeat" else str(next(keys))
        return response(function_call("lookup", {"key": key}, f"call_{next(keys)}_{key}"))

    store = StoringModel(answer)
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], max_agentic_loops=2))

    first = await client.responses.create(model="m", input="q")
    follow_up = await client.responses.create(model="m", input="and then?", previous_response_id=first.id)

    assert follow_up.output_text == "Follow-up answered."
    assert first.id in store.stored and first.output_text
    assert store.model.requests[-1].body["previous_response_id"] == first.id


def streamed_with_done(body: dict[str, Any]) -> Any:
    """A scripted reply streaming `body` and then `data: [DONE]`, as some OpenAI-compatible servers end a stream."""

    def reply(request: Any) -> Any:
        events = [*sse.responses_events(body), b"data: [DONE]\n\n"]
        return StreamingResponse(iter(events), media_type="text/event-stream")

    return reply


async def test_a_done_line_at_the_end_of_the_apps_stream_is_ignored() -> None:
    model = ScriptedModel(
        streamed_with_done(response("Let me look.", function_call("lookup", {"key": "k"}, "call_s"))),
        streamed_with_done(response("It is v.")),
        streamed_with_done(response("Plain.")),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    async with openai_client(app).responses.stream(model="m", input="x") as stream:
        final = await stream.get_final_response()
    raw = await http_client(app).post("/v1/responses", json={"model": "m", "input": "x", "stream": True})

    assert final.output_text == "Let me look.It is v."
    assert raw.status_code == 200 and b"response.completed" in raw.content
    assert b"[DONE]" not in raw.content and b"response.failed" not in raw.content
