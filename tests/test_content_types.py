"""A model app's 2xx answer without a JSON content-type (dropped by a forwarding route, or text/plain or
application/octet-stream, or an event stream to a call that did not stream, or compressed) is judged by what its body
is: a server tool's call never reaches the client, in JSON and in live streams (under uvicorn, with the SDKs' stream
helpers). What still goes on unjudged is said in a WARNING; what could hold a call but cannot be read is refused."""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
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
    assert sniffed(b' \n{"id"', False) == JSON
    assert sniffed(b"[1, 2]", True) == OTHER
    assert sniffed(b"\xef\xbb\xbf\r\nevent: message_start\n", False) == EVENTS
    assert sniffed(b": keep-alive\n", False) == EVENTS
    assert sniffed(b"data:{}", False) == EVENTS  # judged on a request that did not stream too
    assert sniffed(b"dat", False) is None and sniffed(b"dat", True) == OTHER
    assert sniffed(b"\xef\xbb", False) is None
    assert sniffed(b"database dump", False) == OTHER
    assert sniffed(b"\n", False) is None
    assert sniffed(b"\xef\xbb\xbf" + b"x" * SNIFF_BYTES, False) == OTHER  # never waits past SNIFF_BYTES


def calling(route: str) -> tuple[dict[str, Any], dict[str, Any], list[bytes], list[bytes]]:
    """A route's answer calling `lookup`, its final answer, and both as that route's events."""
    if route == "messages":
        first, last = message(tool_use("lookup", {"key": "k"})), message("The value is v.")
        return first, last, list(sse.messages_events(first)), list(sse.messages_events(last))
    if route == "chat":
        first = chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})])
        last = chat_completion("The value is v.")
        return first, last, list(sse.chat_chunks(first, False)), list(sse.chat_chunks(last, False))
    first, last = response("Let me look.", function_call("lookup", {"key": "k"})), response("The value is v.")
    return first, last, list(sse.responses_events(first)), list(sse.responses_events(last))


async def final_text(app: Any, route: str) -> str:
    """The final text a JSON client of `route` gets, through the official SDK."""
    if route == "messages":
        final = await anthropic_client(app).messages.create(model="m", max_tokens=50, messages=USER)
        assert [block.type for block in final.content] == ["text"]
        return final.content[0].text  # type: ignore[union-attr]
    if route == "chat":
        completion = await openai_client(app).chat.completions.create(model="m", messages=USER)
        assert not completion.choices[0].message.tool_calls
        return completion.choices[0].message.content or ""
    answer = await openai_client(app).responses.create(model="m", input="go")
    assert "function_call" not in [item.type for item in answer.output]
    return answer.output_text


@pytest.mark.parametrize("media_type", ["text/event-stream", "text/event-stream; charset=utf-8", None, "text/plain"])
@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_an_event_stream_to_a_call_that_did_not_stream_is_judged_as_the_answer_it_holds(
    route: str, media_type: str | None
) -> None:
    """Before, it went to the client unjudged (with a WARNING), the server's call in it."""
    _, _, first, last = calling(route)
    model = ScriptedModel(plain_stream(first, media_type), plain_stream(last, media_type))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    assert (await final_text(app, route)).endswith("The value is v.")
    assert len(model.requests) == 2 and "stream" not in model.requests[0].body


async def test_an_event_stream_to_a_call_that_did_not_stream_that_holds_no_whole_answer_is_refused() -> None:
    """A stream cut short (its call may be in it) is a model_app_error, never passed on unjudged."""
    _, _, first, _ = calling("messages")
    model = ScriptedModel(plain_stream(first[:-2], "text/event-stream"))  # no message_delta, no message_stop
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    answer = await client.post("http://gateway/v1/messages", json={"model": "m", "max_tokens": 5, "messages": USER})
    assert answer.status_code == 500 and b"lookup" not in answer.content
    assert "did not stream with an event stream" in answer.json()["error"]["message"]


@pytest.mark.parametrize("lead", [b" " * 3000, b"\n" * 3000, b"\r\n \t" * 1000])
@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_white_space_before_the_body_however_long_does_not_take_it_past_the_check(
    route: str, lead: bytes
) -> None:
    """Before, past 1 KB of white space an untyped answer went on unjudged, the server's call in it."""
    first, last, _, _ = calling(route)

    def cut(body: dict[str, Any]) -> StreamingResponse:
        raw = lead + orjson.dumps(body)
        return StreamingResponse(iter([raw[i : i + 100] for i in range(0, len(raw), 100)]), media_type=None)

    model = ScriptedModel(cut(first), cut(last))
    assert (await final_text(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]), route)).endswith(
        "The value is v."
    )
    assert len(model.requests) == 2


def compressed(body: bytes, coding: str, media_type: str | None) -> Response:
    data = {"gzip": gzip.compress, "deflate": zlib.compress}[coding](body)
    return Response(data, media_type=media_type, headers={"content-encoding": coding})


@pytest.mark.parametrize("media_type", ["application/json", None])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_a_compressed_answer_is_decoded_and_judged(route: str, coding: str, media_type: str | None) -> None:
    """Before, a content-encoded answer went on unjudged (with a WARNING), the server's call in it."""
    first, last, _, _ = calling(route)
    model = ScriptedModel(compressed(orjson.dumps(first), coding, media_type), plain(last, None))
    assert (await final_text(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]), route)).endswith(
        "The value is v."
    )
    assert len(model.requests) == 2


async def test_a_compressed_live_stream_is_judged_and_one_the_middleware_cannot_decode_is_refused() -> None:
    _, _, first, last = calling("messages")
    events = compressed(b"".join(first), "gzip", "text/event-stream")
    model = ScriptedModel(events, plain_stream(last, "text/event-stream"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url:
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            final = await stream.get_final_message()
        assert [block.type for block in final.content] == ["text"] and len(model.requests) == 2

        brotli = Response(b"\x8b\x02\x80not really", media_type="application/json", headers={"content-encoding": "br"})
        model.script = [brotli]
        with pytest.raises(anthropic.InternalServerError, match="content-encoded and could not be read: br is not"):
            await claude.messages.create(model="m", max_tokens=50, messages=USER)


@pytest.mark.parametrize(
    "encode",
    [
        lambda body: b"\xef\xbb\xbf" + orjson.dumps(body),  # a byte order mark
        lambda body: orjson.dumps(body).replace(b'"output_tokens":', b'"cost":NaN,"output_tokens":'),
        lambda body: orjson.dumps(body).decode().encode("utf-16"),
    ],
    ids=["bom", "nan", "utf-16"],
)
@pytest.mark.parametrize("media_type", ["application/json", "text/plain; charset=utf-16"])
async def test_json_the_sdks_read_though_strict_json_refuses_is_judged(media_type: str | None, encode: Any) -> None:
    """The SDKs read answers with Python's json, which takes these; before, the middleware passed them on unjudged
    (and without a WARNING when typed JSON), the server's call in them."""
    first, last, _, _ = calling("messages")
    model = ScriptedModel(Response(encode(first), media_type=media_type), plain(last, None))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    assert await final_text(app, "messages") == "The value is v."
    assert len(model.requests) == 2


async def test_json_that_cannot_be_judged_is_refused_and_json_no_one_reads_goes_on_as_sent() -> None:
    first, _, _, _ = calling("messages")
    surrogate = orjson.dumps(first).replace(b'"type":"tool_use"', b'"type":"tool_use","note":"\\ud800"')
    model = ScriptedModel(Response(surrogate, media_type="application/json"), Response(b"{broken", media_type=None))
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))
    )
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    refused = await client.post("http://gateway/v1/messages", json=body)
    assert refused.status_code == 500 and b"lookup" not in refused.content
    assert "JSON the middleware cannot read" in refused.json()["error"]["message"]
    broken = await client.post("http://gateway/v1/messages", json=body)
    assert (broken.status_code, broken.content) == (200, b"{broken")
