"""Streaming clients get the loop too: the SDKs rebuild from the stream exactly what the JSON path returns."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import ANY

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, http_scope, openai_client
from starlette.responses import StreamingResponse
from streams import anthropic_final, event_stream, sdk_dump
from support import Route, ToolHook, read_body

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use

USER: Any = [{"role": "user", "content": "go"}]
USAGE = {"input_tokens": 30, "output_tokens": 7, "cache_read_input_tokens": 4}
CHAT_USAGE = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}


@server_tool
async def lookup(key: str) -> str:
    return f"value of {key}"


def messages_script() -> list[Any]:
    return [
        message("Checking.", tool_use("lookup", {"key": "k"}), usage=USAGE),
        message(
            {"type": "thinking", "thinking": "The value is known now.", "signature": "sig"},
            "The value is known.",
            tool_use("client_tool", {"x": [1, {"y": "é"}]}, id="toolu_client"),
            usage=USAGE,
        ),
    ]


def chat_script() -> list[Any]:
    return [
        chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})], usage=CHAT_USAGE),
        chat_completion(
            "The value is known.", tool_calls=[tool_call("client_tool", {"x": 1}, id="call_client")], usage=CHAT_USAGE
        ),
    ]


async def test_the_anthropic_sdk_rebuilds_from_the_stream_the_message_the_json_path_returns() -> None:
    request: dict[str, Any] = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "go"}]}
    plain_model, streamed_model = ScriptedModel(*messages_script()), ScriptedModel(*messages_script())
    plain = await anthropic_client(AgenticLoopMiddleware(plain_model, hooks=[ServerTools([lookup])])).messages.create(
        **request
    )
    client = anthropic_client(AgenticLoopMiddleware(streamed_model, hooks=[ServerTools([lookup])]))
    async with client.messages.stream(**request) as stream:
        final = await stream.get_final_message()

    # Each scripted answer has its own id; the SDK's (non-beta) stream helper keeps no `usage.iterations`.
    ignored: Any = {"id": True, "usage": {"iterations"}}
    assert final.model_dump(exclude=ignored) == plain.model_dump(exclude=ignored)
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens == 60 and final.usage.output_tokens == 14  # summed over both calls
    for sent in streamed_model.requests:  # asked to stream (live), it answered JSON: the stream is written after
        assert sent.body["stream"] is True


async def test_the_openai_sdk_rebuilds_from_the_chunks_the_completion_the_json_path_returns() -> None:
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    plain = await openai_client(
        AgenticLoopMiddleware(ScriptedModel(*chat_script()), hooks=[ServerTools([lookup])])
    ).chat.completions.create(**request)
    model = ScriptedModel(*chat_script())
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))
    chunks = [
        chunk
        async for chunk in await client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
    ]

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta_call.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta_call.id or ""
            call["name"] += delta_call.function.name or "" if delta_call.function else ""
            call["arguments"] += delta_call.function.arguments or "" if delta_call.function else ""
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]

    expected = plain.choices[0]
    assert content == expected.message.content
    expected_calls = expected.message.tool_calls or []
    assert list(calls.values()) == [
        {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}  # type: ignore[union-attr]
        for call in expected_calls
    ]
    assert finish == [expected.finish_reason] == ["tool_calls"]
    assert usage == [plain.usage]
    assert model.requests[0].body["stream_options"] == {"include_usage": True}  # live: the app is asked for usage


def raw_exchange(app: Any, route: Route, body: dict[str, Any]) -> tuple[asyncio.Queue[Any], Any]:
    raw = orjson.dumps(body)
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: asyncio.Queue[Any] = asyncio.Queue()

    async def receive() -> Any:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()

    return sent, asyncio.create_task(app(http_scope(route.path, raw), receive, sent.put))


async def test_a_live_streams_held_tail_reaches_the_client_in_one_message_that_ends_it() -> None:
    # The events held until the last round was judged (its message_delta and message_stop) go out in one write, not
    # one each, and that message ends the response: a write each, and an empty end after them, cost the server a
    # write each (issue 26). The client reads the same stream.
    script = iter([message("Checking.", tool_use("lookup", {"key": "k"}), usage=USAGE), message("Known.", usage=USAGE)])

    async def model(scope: Any, receive: Any, send: Any) -> None:
        await read_body(receive)
        await event_stream(sse.messages_events(next(script), chunk_size=5))(scope, receive, send)

    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    request = {"model": "m", "max_tokens": 50, "stream": True, "messages": USER}
    sent, task = raw_exchange(app, Route("messages"), request)
    await asyncio.wait_for(task, 5)
    messages = [sent.get_nowait() for _ in range(sent.qsize())][1:]
    assert [m.get("more_body", False) for m in messages] == [True] * (len(messages) - 1) + [False]
    bodies = [message["body"] for message in messages]
    tail = [line for line in bodies[-1].split(b"\n") if line.startswith(b"event: ")]
    assert tail == [b"event: message_delta", b"event: message_stop"]
    final = await anthropic_final(bodies)
    assert [block.type for block in final.content] == ["text", "text"]
    assert final.content[-1].text == "Known."  # type: ignore[union-attr]


async def test_a_live_streams_closing_events_hold_what_a_post_hook_returned_as_json_reads_it() -> None:
    # A post hook's answer reaches the client as its JSON: here its content a tuple, which JSON writes as an array.
    # The closing events are written from the answer read back from its bytes, not from the hook's own objects.
    script = iter([message("Checking.", tool_use("lookup", {"key": "k"}), usage=USAGE), message("Known.", usage=USAGE)])

    async def model(scope: Any, receive: Any, send: Any) -> None:
        await read_body(receive)
        await event_stream(sse.messages_events(next(script), chunk_size=5))(scope, receive, send)

    class Tupled(ServerTools):
        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
            return {**response, "content": tuple(response["content"])}

    app = AgenticLoopMiddleware(model, hooks=[Tupled([lookup])])
    request = {"model": "m", "max_tokens": 50, "stream": True, "messages": USER}
    sent, task = raw_exchange(app, Route("messages"), request)
    await asyncio.wait_for(task, 5)
    bodies = [message["body"] for message in [sent.get_nowait() for _ in range(sent.qsize())][1:]]
    assert b"event: error" not in b"".join(bodies)
    final = await anthropic_final(bodies)
    assert [block.type for block in final.content] == ["text", "text"]
    assert final.content[-1].text == "Known."  # type: ignore[union-attr]


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=["messages", "chat"])
async def test_headers_go_out_at_once_and_keep_alives_flow_while_a_slow_tool_runs(route: Route) -> None:
    release = asyncio.Event()

    @server_tool
    async def slow() -> str:
        await release.wait()
        return "done"

    model = ScriptedModel(route.calls(("slow", {})), route.text("finished"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([slow])], stream_keepalive=0.02)
    sent, task = raw_exchange(app, route, route.request(stream=True))

    start = await asyncio.wait_for(sent.get(), 5)
    assert start["status"] == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    keepalive = b"event: ping" if route.name == "messages" else b": keep-alive"
    pings = [await asyncio.wait_for(sent.get(), 5) for _ in range(3)]
    assert all(p["body"].startswith(keepalive) and p["more_body"] for p in pings)
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 5)
    rest = []
    while not sent.empty():
        rest.append(sent.get_nowait())
    stream = b"".join(m.get("body", b"") for m in rest)
    assert b"finished" in stream
    assert [m.get("more_body", False) for m in rest] == [True] * (len(rest) - 1) + [False]  # the last one ends it


async def test_an_error_mid_loop_reaches_the_sdks_as_an_error_event() -> None:
    class Failing(ToolHook):
        agentic_loop_streaming = True

        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            raise RuntimeError("search index unavailable")

        async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan

    model = ScriptedModel(message(tool_use("lookup", {"k": 1})), chat_completion(tool_calls=[tool_call("lookup", {})]))
    app = AgenticLoopMiddleware(model, hooks=[Failing()])

    with pytest.raises(anthropic.APIStatusError, match="search index unavailable"):
        async with anthropic_client(app).messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            await stream.get_final_message()
    with pytest.raises(openai.APIError, match="search index unavailable"):
        async for _ in await openai_client(app).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True
        ):
            pass


async def test_an_error_answer_of_the_app_becomes_an_error_event_with_its_message() -> None:
    from starlette.responses import JSONResponse

    rate_limited = JSONResponse({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, 429)
    app = AgenticLoopMiddleware(ScriptedModel(rate_limited), hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.APIStatusError, match="slow down"):
        async with anthropic_client(app).messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            await stream.get_final_message()


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=["messages", "chat"])
async def test_streams_no_hook_asks_for_pass_through_byte_identical_and_unbuffered(route: Route) -> None:
    release = asyncio.Event()

    async def events() -> Any:
        yield b"data: first\n\n"
        await release.wait()
        yield b"data: second\n\n"

    class Choosy(ToolHook):
        @staticmethod
        def agentic_loop_streaming(request: dict[str, Any]) -> bool:
            return bool(request.get("tools"))  # only streams that declare tools take part

    model = ScriptedModel(lambda request: StreamingResponse(events(), media_type="text/event-stream"))
    app = AgenticLoopMiddleware(model, hooks=[Choosy()])
    body = route.request(stream=True, stream_options={"include_usage": True})
    sent, task = raw_exchange(app, route, body)

    start = await asyncio.wait_for(sent.get(), 5)
    first = await asyncio.wait_for(sent.get(), 5)
    assert start["status"] == 200 and first["body"] == b"data: first\n\n"
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 5)
    assert model.requests[0].body == body  # stream fields and all, as the client sent them


async def test_the_middleware_can_turn_streaming_loops_off_or_on_for_every_hook() -> None:
    route = Route("messages")
    model = ScriptedModel(route.text("plain json"))
    off = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], streaming=False)
    sent, task = raw_exchange(off, route, route.request(stream=True))
    await asyncio.wait_for(task, 5)
    assert (b"content-type", b"application/json") in sent.get_nowait()["headers"]  # passed through
    assert model.requests[0].body["stream"] is True

    hook = ToolHook()  # no `agentic_loop_streaming` of its own
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("looped"))
    on = AgenticLoopMiddleware(model, hooks=[hook], streaming=True)
    sent, task = raw_exchange(on, route, route.request(stream=True))
    await asyncio.wait_for(task, 5)
    assert len(model.requests) == 2
    assert hook.plans[0]["stream"] is True  # hooks are told the client streams


async def test_an_answer_the_stream_cannot_carry_ends_the_stream_with_an_error_event() -> None:
    route = Route("chat")
    odd = chat_completion("fine")
    odd["choices"][0]["message"]["tool_calls"] = {"not": "a list"}
    app = AgenticLoopMiddleware(ScriptedModel(odd), hooks=[ServerTools([lookup])])
    sent, task = raw_exchange(app, route, route.request(stream=True))
    await asyncio.wait_for(task, 5)
    messages = [sent.get_nowait() for _ in range(sent.qsize())]
    assert [m["type"] for m in messages].count("http.response.start") == 1
    assert [m.get("more_body", False) for m in messages[1:]] == [True] * (len(messages) - 2) + [False]
    assert b"could not be streamed" in messages[-1]["body"]  # the error event ends the stream


async def test_buffered_an_app_that_streams_anyway_is_judged_as_the_answer_its_stream_holds() -> None:
    """Called without streaming, the app streams anyway: its events are read whole as the answer they hold, so the
    server's call is run, never sent (before, the stream went to the client as it was, the server's call in it)."""
    model = ScriptedModel(
        *[
            StreamingResponse(iter(list(sse.messages_events(body))), media_type="text/event-stream")
            for body in messages_script()
        ]
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], streaming="buffered")
    async with serving(app) as url:
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            final = await stream.get_final_message()

    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[2].id == "toolu_client"  # type: ignore[union-attr]
    assert len(model.requests) == 2 and "stream" not in model.requests[0].body
    assert final.usage.input_tokens == 60  # summed: the answers were read, not passed on


@pytest.mark.parametrize("end", [b"\n", b""], ids=["one line end", "none"])
async def test_a_messages_stream_whose_last_event_is_not_dispatched_ends_as_the_sdk_reads_it(end: bytes) -> None:
    """The HTML standard dispatches no event without its blank line, so `message_stop` is not read; the anthropic SDK
    reads the message whole anyway (it needs only `message_delta`). Before, the middleware ended such a stream with an
    error event."""
    events = b"".join(sse.messages_events(message("Hi.", tool_use("client_tool", {"a": 1}), usage=USAGE)))
    cut = events.removesuffix(b"\n\n") + end
    model = ScriptedModel(StreamingResponse(iter([cut]), media_type="text/event-stream"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url:
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            final = await stream.get_final_message()
    assert sdk_dump(final) == sdk_dump(await anthropic_final([cut]))


class Judged(ServerTools):
    """ServerTools that keeps every answer its gate judged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[Any] = []

    async def async_should_run_agentic_loop(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        self.answers.append(orjson.loads(orjson.dumps(response)))
        return await super().async_should_run_agentic_loop(response, *args, **kwargs)


def _late(events: list[bytes]) -> list[bytes]:
    """The events with each `content_block_stop` moved in front of the block's last delta."""
    out: list[bytes] = []
    for event in events:
        if event.startswith(b"event: content_block_stop") and out and b"content_block_delta" in out[-1]:
            out.insert(len(out) - 1, event)
        else:
            out.append(event)
    return out


@pytest.mark.parametrize("shape", ["never stopped", "a delta after its stop"])
async def test_the_hooks_judge_every_delta_the_sdk_adds_to_its_block(shape: str) -> None:
    """The anthropic SDK adds every delta to its block, whether or not a `content_block_stop` came before (or at all).
    The relay joined a block's streamed strings only at its stop: a block the app never stopped reached the hooks
    with no text and a call with `input: {}` (its tool run without its arguments), and a delta after its block's stop
    reached the client alone, so the client's message and the answer the hooks judged differed."""
    rounds = [
        message("Checking.", tool_use("lookup", {"key": "k"}), usage=USAGE),
        message("The value is known.", usage=USAGE),
    ]

    def events(body: dict[str, Any]) -> list[bytes]:
        sent = list(sse.messages_events(body, chunk_size=4))
        if shape == "never stopped":
            return [event for event in sent if not event.startswith(b"event: content_block_stop")]
        return _late(sent)

    ran: list[str] = []

    @server_tool
    async def lookup(key: str) -> str:
        ran.append(key)
        return f"value of {key}"

    hook = Judged([lookup])
    model = ScriptedModel(*(event_stream(iter(events(body))) for body in rounds))
    claude = anthropic_client(AgenticLoopMiddleware(model, hooks=[hook]))
    async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
        final = await stream.get_final_message()
    assert ran == ["k"]
    assert [answer["content"] for answer in hook.answers] == [
        [{"type": "text", "text": "Checking."}, {**tool_use("lookup", {"key": "k"}), "id": ANY}],
        [{"type": "text", "text": "The value is known."}],
    ]
    assert [block.model_dump(exclude_none=True) for block in final.content] == [
        {"type": "text", "text": "Checking."},
        {"type": "text", "text": "The value is known."},
    ]
