"""examples/gateway: the YAML-configured FastAPI gateway, its demo model, and forwarding to an upstream over HTTP."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agentic_middleware import ConfigurationError, load_config
from examples.compression import compression_hook
from examples.gateway import CONFIG, DemoModel, Upstream, create_app, model_app, serving
from examples.gateway.__main__ import main
from examples.websearch import web_search_hook


def test_the_yaml_config_names_both_example_hooks() -> None:
    assert load_config(CONFIG).hooks == (compression_hook, web_search_hook)
    assert load_config(CONFIG).max_agentic_loops == 4


def test_a_broken_config_stops_the_gateway_at_creation(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("litellm_settings:\n  callbacks: [examples.websearch.hook.no_such_hook]\n")
    with pytest.raises(ConfigurationError, match="no_such_hook"):
        create_app(config)


async def test_the_default_gateway_answers_with_web_search_on_both_routes() -> None:
    app = create_app()
    reply = await anthropic_client(app).messages.create(
        model="demo", max_tokens=100, messages=[{"role": "user", "content": "Who created Git?"}]
    )
    assert reply.content[0].text.startswith('According to "Git" (https://example.org/wiki/git): ')  # type: ignore[union-attr]
    completion = await openai_client(app).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "Where is Nairobi National Park?"}]
    )
    assert completion.choices[0].message.content.startswith('According to "Nairobi"')  # type: ignore[union-attr]


async def test_the_gateway_forwards_to_an_upstream_over_http_under_both_sdks() -> None:
    upstream_model = DemoModel()
    async with (
        serving(model_app(upstream_model)) as upstream_url,
        serving(create_app(CONFIG, Upstream(f"{upstream_url}/v1"))) as gateway_url,
        anthropic.AsyncAnthropic(base_url=gateway_url, api_key="x", max_retries=0) as claude,
        openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0) as gpt,
    ):
        reply = await claude.messages.create(
            model="demo",
            max_tokens=100,
            messages=[{"role": "user", "content": "What is the capital of Australia?"}],
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
        completion = await gpt.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "How tall is Mount Everest?"}]
        )
        # Streaming clients get the loop too: the search runs, then the answer is streamed.
        async with claude.messages.stream(
            model="demo", max_tokens=100, messages=[{"role": "user", "content": "Who created Git?"}]
        ) as stream:
            streamed = await stream.get_final_message()
        chunks = await gpt.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Hello again"}], stream=True
        )
        pieces = [chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices]

    assert reply.content[0].text.startswith('According to "Canberra"')  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"
    assert completion.choices[0].message.content.startswith('According to "Mount Everest"')  # type: ignore[union-attr]
    assert streamed.content[0].text.startswith('According to "Git"')  # type: ignore[union-attr]
    assert "".join(pieces).startswith("You said: 'Hello again'.")
    assert upstream_model.calls == 7  # a search and an answer for each question, one call for the greeting


def recording_upstream(seen: list[Request], response: Response) -> Starlette:
    async def answer(request: Request) -> Response:
        await request.body()
        seen.append(request)
        return response

    return Starlette(
        routes=[Route(path, answer, methods=["POST"]) for path in ("/v1/messages", "/v1/chat/completions")]
    )


@asynccontextmanager
async def gateway_to(upstream: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the gateway (in-process), whose Upstream reaches `upstream` in-process too."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream)) as upstream_client:
        gateway = create_app(CONFIG, Upstream("http://upstream.test/v1", upstream_client))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gateway") as client:
            yield client


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions"])
async def test_an_upstream_4xx_reaches_the_client_unchanged(path: str) -> None:
    error = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
    seen: list[Request] = []
    upstream = recording_upstream(
        seen, Response(error, 401, media_type="application/json; charset=utf-8", headers={"request-id": "req_1"})
    )
    headers = {"x-api-key": "sk-1", "authorization": "Bearer sk-2", "anthropic-version": "2023-06-01", "cookie": "c=1"}
    async with gateway_to(upstream) as client:
        response = await client.post(path, json={"model": "m", "messages": []}, headers=headers)

    assert response.status_code == 401
    assert response.content == error
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.headers["request-id"] == "req_1"
    (request,) = seen
    assert request.url.path == path
    for name, value in headers.items():
        assert request.headers.get(name) == (None if name == "cookie" else value)
    assert request.headers["host"] == "upstream.test"


async def test_an_unreachable_upstream_is_a_502_in_the_routes_shape() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    gateway = create_app(CONFIG, Upstream(f"http://127.0.0.1:{port}/v1"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        await anthropic_client(gateway).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.status_code == 502 and "ConnectError" in raised.value.message
    with pytest.raises(ValueError, match="http"):
        Upstream("localhost:8000")


async def test_a_stream_is_forwarded_chunk_by_chunk() -> None:
    """The upstream mode's model app streams what the upstream streams (a stream no hook takes part in)."""
    first_arrived = asyncio.Event()

    async def events() -> AsyncIterator[bytes]:
        yield b'data: {"n": 1}\n\n'
        await first_arrived.wait()  # the second chunk only exists once the client has the first
        yield b'data: {"n": 2}\n\ndata: [DONE]\n\n'

    upstream = recording_upstream([], StreamingResponse(events(), media_type="text/event-stream"))
    async with (
        serving(upstream) as upstream_url,
        serving(model_app(Upstream(f"{upstream_url}/v1"))) as gateway_url,
        httpx.AsyncClient(base_url=gateway_url) as client,
        asyncio.timeout(3),
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            chunks = response.aiter_bytes()
            assert await anext(chunks) == b'data: {"n": 1}\n\n'
            first_arrived.set()
            assert b"".join([chunk async for chunk in chunks]) == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


def test_the_demo_command_prints_both_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--demo"]) == 0
    out = capsys.readouterr().out
    assert 'A: According to "Canberra"' in out
    assert 'A: According to "Mount Everest"' in out
    assert "called 4 times" in out
