"""Live streaming's choices, in process: which streams go live or buffered, what a live client gets when the
answer changes after its text went out, keep-alives while the app is silent, and failures mid-stream."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, http_scope, openai_client
from starlette.responses import JSONResponse
from streams import event_stream
from support import Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, ServerTools, server_tool, sse
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use

USER: Any = [{"role": "user", "content": "go"}]


@server_tool
async def lookup(key: str) -> str:
    return f"value of {key}"


def streamed(body: dict[str, Any]) -> Any:
    """A reply that streams `body` in its route's format (chat with usage, as the app is asked)."""
    if "choices" in body:
        return event_stream(list(sse.chat_chunks(body, include_usage=True, chunk_size=4)))
    return event_stream(list(sse.messages_events(body, chunk_size=4)))


async def exchange(app: Any, route: Route, body: dict[str, Any]) -> list[Any]:
    """Every message the app sends for one request whose client never leaves."""
    raw = orjson.dumps(body)
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: list[Any] = []

    async def receive() -> Any:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        sent.append(message)

    await asyncio.wait_for(app(http_scope(route.path, raw), receive, send), 10)
    return sent


@pytest.mark.parametrize(
    ("hook_wish", "setting", "expected"),
    [
        (True, None, "live"),
        ("buffered", None, "buffered"),
        (True, "buffered", "buffered"),
        (False, True, "live"),
        (lambda request: "buffered", None, "buffered"),
        (False, None, "passes"),
    ],
)
async def test_which_streams_go_live_and_which_buffered(hook_wish: Any, setting: Any, expected: str) -> None:
    class Hook(ToolHook):
        agentic_loop_streaming = staticmethod(hook_wish) if callable(hook_wish) else hook_wish

    model = ScriptedModel(streamed(message("hello")), default=message("hello"))
    app = AgenticLoopMiddleware(model, hooks=[Hook()], streaming=setting)
    sent = await exchange(app, Route("messages"), Route("messages").request(stream=True))
    request = model.requests[0].body
    if expected == "live":
        assert request["stream"] is True
        assert sent[0]["status"] == 200 and b"hell" in b"".join(m.get("body", b"") for m in sent)
    elif expected == "buffered":
        assert "stream" not in request  # the app is called without streaming; the stream is written after
    else:
        assert request == Route("messages").request(stream=True)  # untouched


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=str)
async def test_a_response_override_follows_the_streamed_preamble(route: Route) -> None:
    class Overriding(ToolHook):
        agentic_loop_streaming = True

        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            override = message("Overridden.") if route.name == "messages" else chat_completion("Overridden.")
            return AgenticLoopPlan(response_override=override)

        async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan

    first = (
        message("Let me look.", tool_use("lookup", {"k": 1}))
        if route.name == "messages"
        else chat_completion("Let me look.", tool_calls=[tool_call("lookup", {"k": 1})])
    )
    app = AgenticLoopMiddleware(ScriptedModel(streamed(first)), hooks=[Overriding()])
    if route.name == "messages":
        async with anthropic_client(app).messages.stream(model="m", max_tokens=9, messages=USER) as stream:
            final = await stream.get_final_message()
        assert [block.text for block in final.content if block.type == "text"] == ["Let me look.", "Overridden."]
        assert not [block for block in final.content if block.type == "tool_use"]
    else:
        async with openai_client(app).chat.completions.stream(model="m", messages=USER) as chunks:
            completion = await chunks.get_final_completion()
        assert completion.choices[0].message.content == "Let me look.\n\nOverridden."
        assert not completion.choices[0].message.tool_calls


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=str)
async def test_a_post_hook_that_rewrites_streamed_text_ends_the_stream_with_an_error(route: Route) -> None:
    class Redacting(ToolHook):
        agentic_loop_streaming = True

        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
            redacted = message("[redacted]") if route.name == "messages" else chat_completion("[redacted]")
            return redacted

    model = ScriptedModel(streamed(route.calls(("lookup", {"k": 1}))), streamed(route.text("The secret is 42.")))
    app = AgenticLoopMiddleware(model, hooks=[Redacting()])
    if route.name == "messages":
        with pytest.raises(anthropic.APIStatusError, match="changed after it was streamed"):
            async with anthropic_client(app).messages.stream(model="m", max_tokens=9, messages=USER) as stream:
                await stream.get_final_message()
    else:
        with pytest.raises(openai.APIError, match="changed after it was streamed"):
            async with openai_client(app).chat.completions.stream(model="m", messages=USER) as chunks:
                await chunks.get_final_completion()


async def test_a_post_hook_that_only_appends_is_streamed() -> None:
    class Appending(ToolHook):
        agentic_loop_streaming = True

        async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
            return {**response, "content": [*response["content"], {"type": "text", "text": "Sources: [1]"}]}

    route = Route("messages")
    model = ScriptedModel(streamed(route.calls(("lookup", {"k": 1}))), streamed(route.text("Answer.")))
    app = AgenticLoopMiddleware(model, hooks=[Appending()])
    async with anthropic_client(app).messages.stream(model="m", max_tokens=9, messages=USER) as stream:
        final = await stream.get_final_message()
    assert [block.text for block in final.content if block.type == "text"] == ["Answer.", "Sources: [1]"]


@pytest.mark.parametrize("see", [True, False])
async def test_gates_see_stream_false_hands_gates_the_whole_answer_flag(see: bool) -> None:
    class LiteLLMStyle(ToolHook):
        async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> Any:
            if arguments["stream"]:
                return False, {}  # the common LiteLLM pattern
            return await super().async_should_run_agentic_loop(response, **arguments)

    route = Route("messages")
    model = ScriptedModel(streamed(route.calls(("lookup", {"k": 1}))), streamed(route.text("Done.")))
    app = AgenticLoopMiddleware(model, hooks=[LiteLLMStyle()], streaming=True, gates_see_stream=see)
    async with anthropic_client(app).messages.stream(model="m", max_tokens=9, messages=USER) as stream:
        final = await stream.get_final_message()
    if see:  # the gate declines: the server's call reaches the client, as under LiteLLM
        assert [block.type for block in final.content] == ["tool_use"]
    else:
        assert [block.type for block in final.content] == ["text"] and len(model.requests) == 2


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=str)
async def test_keep_alives_flow_while_the_app_is_silent_mid_round(route: Route) -> None:
    release = asyncio.Event()
    events = list(
        sse.messages_events(route.text("one two"), chunk_size=4)
        if route.name == "messages"
        else sse.chat_chunks(route.text("one two"), include_usage=True, chunk_size=4)
    )

    async def paused() -> Any:
        yield b"".join(events[:3])
        await release.wait()
        for event in events[3:]:
            yield event

    app = AgenticLoopMiddleware(
        ScriptedModel(lambda request: event_stream(paused())), hooks=[ServerTools([lookup])], stream_keepalive=0.02
    )
    raw = orjson.dumps(route.request(stream=True))
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: asyncio.Queue[Any] = asyncio.Queue()

    async def receive() -> Any:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()

    task = asyncio.create_task(app(http_scope(route.path, raw), receive, sent.put))
    keepalive = b"event: ping" if route.name == "messages" else b": keep-alive"
    pings = 0
    while pings < 3:
        message = await asyncio.wait_for(sent.get(), 5)
        pings += message.get("body", b"").startswith(keepalive)
    release.set()
    await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("route", [Route("messages"), Route("chat")], ids=str)
async def test_the_apps_error_event_mid_stream_reaches_the_client_as_an_error_event(route: Route) -> None:
    events = list(
        sse.messages_events(route.text("partial"), chunk_size=3)
        if route.name == "messages"
        else sse.chat_chunks(route.text("partial"), include_usage=True, chunk_size=3)
    )
    error = (
        sse.messages_error("overloaded_error", "the model is overloaded")
        if route.name == "messages"
        else sse.chat_error("the model is overloaded")
    )
    model = ScriptedModel(event_stream([*events[:4], error]))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    if route.name == "messages":
        with pytest.raises(anthropic.APIStatusError, match="overloaded"):
            async with anthropic_client(app).messages.stream(model="m", max_tokens=9, messages=USER) as stream:
                await stream.get_final_message()
    else:
        with pytest.raises(openai.APIError, match="overloaded"):
            async with openai_client(app).chat.completions.stream(model="m", messages=USER) as chunks:
                await chunks.get_final_completion()


async def test_an_error_answer_after_the_first_round_is_an_error_event() -> None:
    route = Route("messages")
    failing = JSONResponse({"type": "error", "error": {"type": "overloaded_error", "message": "try later"}}, 529)
    model = ScriptedModel(streamed(route.calls(("lookup", {"key": "k"}), text="Checking.")), failing)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], rerun_retries=0)  # retries: test_rerun_retries
    sent = await exchange(app, route, route.request(stream=True))
    assert sent[0]["status"] == 200
    stream = b"".join(message.get("body", b"") for message in sent)
    assert b"Chec" in stream and stream.count(b"event: error") == 1 and b"try later" in stream
    assert b'"name":"lookup"' not in stream
