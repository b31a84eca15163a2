"""Live streaming under uvicorn on 127.0.0.1, judged by the official SDKs: every round's text reaches the
client as the model app makes it, server tool calls never do, and first-call errors keep their status."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest
from starlette.responses import JSONResponse
from streams import LockStep, event_stream
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use

PREAMBLE = "pre0 pre1 pre2 "
TOKENS = "tok0 tok1 tok2 tok3 tok4 "
USAGE = {"input_tokens": 30, "output_tokens": 7}
CHAT_USAGE = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
USER: Any = [{"role": "user", "content": "go"}]
ROUTES = ["messages", "chat"]


def round_events(route: str, body: dict[str, Any]) -> list[bytes]:
    """A round's stream as the app sends it, one word per text delta (the app is asked for usage on chat)."""
    if route == "messages":
        return list(sse.messages_events(body, chunk_size=5))
    return list(sse.chat_chunks(body, include_usage=True, chunk_size=5))


def calling(route: str, text: str, name: str = "lookup") -> dict[str, Any]:
    if route == "messages":
        return message(text, tool_use(name, {"key": "k"}), usage=USAGE)
    return chat_completion(text, tool_calls=[tool_call(name, {"key": "k"})], usage=CHAT_USAGE)


def saying(route: str, text: str) -> dict[str, Any]:
    return message(text, usage=USAGE) if route == "messages" else chat_completion(text, usage=CHAT_USAGE)


def clients(url: str, **options: Any) -> tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI]:
    options = {"api_key": "test-key", "max_retries": 0, **options}
    return anthropic.AsyncAnthropic(base_url=url, **options), openai.AsyncOpenAI(base_url=f"{url}/v1", **options)


async def stream_text(url: str, route: str, on_text: Any, **options: Any) -> Any:
    """Stream one request with the route's SDK helper, calling `on_text(text so far)` at every text delta."""
    claude, gpt = clients(url, **options)
    if route == "messages":
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            async for event in stream:
                if event.type == "text":
                    on_text(event.snapshot)
            return await stream.get_final_message()
    async with gpt.chat.completions.stream(model="m", messages=USER, stream_options={"include_usage": True}) as chunks:
        async for event in chunks:
            if event.type == "content.delta" and event.delta:
                on_text(event.snapshot)
        return await chunks.get_final_completion()


@pytest.mark.parametrize("route", ROUTES)
async def test_every_rounds_text_streams_as_the_app_makes_it(route: str) -> None:
    preamble_seen = asyncio.Event()
    tool_released_by_client: list[bool] = []

    @server_tool
    async def lookup(key: str) -> str:
        """Finishes only once the client has the preamble (or after 5 s, which fails the test)."""
        try:
            await asyncio.wait_for(preamble_seen.wait(), 5)
            tool_released_by_client.append(True)
        except TimeoutError:
            tool_released_by_client.append(False)
        return f"value of {key}"

    final_round = LockStep(b':"tok')  # a text delta of the final round
    model = ScriptedModel(
        event_stream(round_events(route, calling(route, PREAMBLE))),
        lambda request: event_stream(final_round.events(round_events(route, saying(route, TOKENS)))),
    )

    def on_text(snapshot: str) -> None:
        if "pre2" in snapshot:
            preamble_seen.set()
        if "tok" in snapshot:
            final_round.saw()

    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    async with serving(app) as url:
        final = await stream_text(url, route, on_text)

    assert tool_released_by_client == [True]  # the preamble reached the client while the tool still ran
    assert final_round.in_step and len(final_round.waits) == 4  # each token reached it before the app made the next
    if route == "messages":
        assert [block.type for block in final.content] == ["text", "text"]  # no tool_use: the server's call stayed
        assert [block.text for block in final.content] == [PREAMBLE, TOKENS]
        assert (final.usage.input_tokens, final.usage.output_tokens) == (60, 14)  # summed over both rounds
        assert final.stop_reason == "end_turn"
    else:
        assert final.choices[0].message.content == PREAMBLE + "\n\n" + TOKENS
        assert not final.choices[0].message.tool_calls
        assert final.choices[0].finish_reason == "stop"
        assert final.usage.prompt_tokens == 30 and final.usage.completion_tokens == 7  # the last round's
        assert len(final.usage.model_extra["iterations"]) == 2  # type: ignore[index]  # each round's: the bill
    assert [request.body["stream"] for request in model.requests] == [True, True]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (429, "rate_limit_error", (anthropic.RateLimitError, openai.RateLimitError)),
        (401, "authentication_error", (anthropic.AuthenticationError, openai.AuthenticationError)),
    ],
)
async def test_a_first_call_error_reaches_the_client_with_its_status(
    route: str, status: int, kind: str, error: tuple[type[Exception], type[Exception]]
) -> None:
    body = {"type": "error", "error": {"type": kind, "message": "not now"}}
    model = ScriptedModel(JSONResponse(body, status))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([])], streaming=True)
    async with serving(app) as url:
        with pytest.raises(error[0] if route == "messages" else error[1], match="not now"):
            await stream_text(url, route, lambda text: None)


@pytest.mark.parametrize("route", ROUTES)
async def test_the_sdks_retry_a_rate_limited_stream(route: str) -> None:
    limited = JSONResponse({"error": {"message": "slow down"}}, 429, headers={"retry-after-ms": "10"})
    model = ScriptedModel(limited, event_stream(round_events(route, saying(route, TOKENS))))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([])], streaming=True)
    async with serving(app) as url:
        final = await stream_text(url, route, lambda text: None, max_retries=1)
    text = final.content[0].text if route == "messages" else final.choices[0].message.content
    assert text == TOKENS and len(model.requests) == 2


@pytest.mark.parametrize("route", ROUTES)
async def test_a_client_that_leaves_mid_round_cancels_the_apps_stream_and_cleanup_runs(route: str) -> None:
    closed = asyncio.Event()

    async def endless() -> Any:
        try:
            for event in round_events(route, saying(route, TOKENS))[:4]:
                yield event
            await asyncio.sleep(60)
        finally:
            closed.set()

    hook = ToolHook()
    model = ScriptedModel(
        event_stream(round_events(route, calling(route, PREAMBLE))), lambda request: event_stream(endless())
    )
    app = AgenticLoopMiddleware(model, hooks=[hook], streaming=True)

    class Leave(Exception):
        pass

    def on_text(snapshot: str) -> None:
        if "tok0" in snapshot:
            raise Leave  # leaves the SDK's stream context: the connection closes mid-round

    async with serving(app) as url:
        with pytest.raises(Leave):
            await stream_text(url, route, on_text)
        await asyncio.wait_for(closed.wait(), 5)
        for _ in range(100):
            if hook.cleanups:
                break
            await asyncio.sleep(0.05)
    assert len(hook.cleanups) == 1
