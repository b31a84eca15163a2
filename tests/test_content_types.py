"""A model app's 2xx answer without a JSON content-type (dropped by a forwarding route, or text/plain or
application/octet-stream) is judged by what its body is: a server tool's call never reaches the client, in JSON and
in live streams (under uvicorn, with the SDKs' stream helpers). What still goes on unjudged is said in a WARNING."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from conftest import anthropic_client, openai_client
from starlette.responses import Response, StreamingResponse
from streams import USER

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.sniff import EVENTS, JSON, OTHER, SNIFF_BYTES, sniffed
from agentic_middleware.testing import (
    ScriptedModel,
    chat_completion,
    function_call,
    message,
    response,
    tool_call,
    tool_use,
)

TYPES = [None, "text/plain", "application/octet-stream"]


@server_tool
async def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}"


def plain(body: dict[str, Any], media_type: str | None) -> Response:
    """A JSON body as a forwarding route sends it: `Response(body)` has no content-type unless one is given."""
    return Response(orjson.dumps(body), media_type=media_type)


def plain_stream(events: list[bytes], media_type: str | None) -> StreamingResponse:
    """Events as `StreamingResponse(upstream.aiter_raw())` forwards them: no content-type, cut anywhere."""
    raw = b"".join(events)

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 7):
            yield raw[start : start + 7]

    return StreamingResponse(pieces(), media_type=media_type)


@pytest.mark.parametrize("media_type", TYPES)
async def test_a_messages_answer_without_a_json_type_is_judged_and_its_server_call_never_reaches_the_client(
    media_type: str | None,
) -> None:
    model = ScriptedModel(
        plain(message(tool_use("lookup", {"key": "k"})), media_type), plain(message("The value is v."), media_type)
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    final = await anthropic_client(app).messages.create(model="m", max_tokens=50, messages=USER)

    assert [block.type for block in final.content] == ["text"] and final.content[0].text == "The value is v."  # type: ignore[union-attr]
    assert len(model.requests) == 2
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == "value of k"


@pytest.mark.parametrize("media_type", TYPES)
async def test_a_chat_answer_without_a_json_type_is_judged(media_type: str | None) -> None:
    model = ScriptedModel(
        plain(chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})]), media_type),
        plain(chat_completion("The value is v."), media_type),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    final = await openai_client(app).chat.completions.create(model="m", messages=USER)

    assert final.choices[0].message.content == "The value is v." and not final.choices[0].message.tool_calls
    assert len(model.requests) == 2


async def test_a_responses_answer_and_stream_without_their_type_are_judged() -> None:
    calling = response("Let me look.", function_call("lookup", {"key": "k"}))
    model = ScriptedModel(
        plain(calling, None),
        plain(response("The value is v."), None),
        plain_stream(list(sse.responses_events(calling)), None),
        plain_stream(list(sse.responses_events(response("The value is v."))), None),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    final = await openai_client(app).responses.create(model="m", input="go")
    assert final.output_text == "The value is v." and len(model.requests) == 2
    async with serving(app) as url:
        gpt = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test-key", max_retries=0)
        async with gpt.responses.stream(model="m", input="go") as stream:
            streamed = await stream.get_final_response()
    assert [item.type for item in streamed.output] == ["message", "message"]  # no function_call: it stayed
    assert streamed.output_text == "Let me look.The value is v." and len(model.requests) == 4


@pytest.mark.parametrize("media_type", [None, "text/plain"])
async def test_a_live_messages_stream_without_its_type_is_read_as_events(media_type: str | None) -> None:
    model = ScriptedModel(
        plain_stream(list(sse.messages_events(message("Let me look.", tool_use("lookup", {"key": "k"})))), media_type),
        plain_stream(list(sse.messages_events(message("The value is v."))), media_type),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url:
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            final = await stream.get_final_message()

    assert [block.type for block in final.content] == ["text", "text"]  # no tool_use: the server's call stayed
    assert [block.text for block in final.content] == ["Let me look.", "The value is v."]  # type: ignore[union-attr]
    assert [request.body["stream"] for request in model.requests] == [True, True]


async def test_a_live_chat_stream_without_its_type_is_read_as_events() -> None:
    calling = chat_completion("Let me look.", tool_calls=[tool_call("lookup", {"key": "k"})])
    model = ScriptedModel(
        plain_stream(list(sse.chat_chunks(calling, include_usage=True)), None),
        plain_stream(list(sse.chat_chunks(chat_completion("The value is v."), include_usage=True)), None),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url:
        gpt = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test-key", max_retries=0)
        async with gpt.chat.completions.stream(model="m", messages=USER) as stream:
            final = await stream.get_final_completion()

    assert final.choices[0].message.content == "Let me look.\n\nThe value is v."
    assert not final.choices[0].message.tool_calls


async def test_an_answer_that_is_neither_goes_on_as_sent_with_one_warning_per_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel(default=Response(b"plain words", media_type="text/plain"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
    with caplog.at_level(logging.WARNING, logger="agentic_middleware"):
        for _ in range(2):
            answer = await client.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": USER})
            assert answer.status_code == 200 and answer.content == b"plain words"
            assert answer.headers["content-type"].startswith("text/plain")
    warnings = [record.getMessage() for record in caplog.records if "passed through without hooks" in record.message]
    assert warnings == [
        "a 2xx answer of the model app on /v1/messages passed through without hooks: it is of type text/plain and its "
        "body is neither a JSON object nor an event stream"
    ]


async def test_a_stream_of_another_kind_goes_on_at_once_not_held() -> None:
    """The app sends one line, then waits until the client has it: held, it would never arrive."""
    arrived = asyncio.Event()
    waited: list[bool] = []

    async def lines() -> AsyncIterator[bytes]:
        yield b"first line\n"
        try:
            await asyncio.wait_for(arrived.wait(), 5)
            waited.append(True)
        except TimeoutError:
            waited.append(False)
        yield b"second line\n"

    model = ScriptedModel(lambda request: StreamingResponse(lines(), media_type=None))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        async with client.stream("POST", "/v1/messages", json=body) as answer:
            received = b""
            async for chunk in answer.aiter_raw():
                received += chunk
                if b"first line" in received:
                    arrived.set()
    assert received == b"first line\nsecond line\n" and waited == [True]


def test_the_first_bytes_decide_and_no_more_than_a_kilobyte_is_held() -> None:
    assert sniffed(b' \n{"id"', False, False) == JSON
    assert sniffed(b"[1, 2]", True, True) == OTHER
    assert sniffed(b"\xef\xbb\xbf\r\nevent: message_start\n", False, True) == EVENTS
    assert sniffed(b": keep-alive\n", False, True) == EVENTS
    assert sniffed(b"data:{}", False, False) == OTHER  # a request that did not stream reads no events
    assert sniffed(b"dat", False, True) is None and sniffed(b"dat", True, True) == OTHER
    assert sniffed(b"\xef\xbb", False, True) is None
    assert sniffed(b"database dump", False, True) == OTHER
    assert sniffed(b"\n" * 100, False, True) is None
    assert sniffed(b"\n" * SNIFF_BYTES, False, True) == OTHER  # never waits past SNIFF_BYTES
    assert sniffed(b" " * SNIFF_BYTES, False, False) == OTHER
