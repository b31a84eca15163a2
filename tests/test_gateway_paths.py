"""The gateway as a transparent proxy for every path, its upstream and client keys, its flags and variables, and
`/metrics` and `/health`. Upstreams are served by uvicorn on 127.0.0.1; the gateway runs in process or under uvicorn."""

from __future__ import annotations

import asyncio
import http.client
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentic_middleware import ConfigurationError, Settings, load_config
from agentic_middleware.compression import CompressionHook
from agentic_middleware.gateway import (
    DEMO_CONFIG,
    DemoModel,
    Upstream,
    Upstreams,
    cli,
    create_app,
    environment,
    model_app,
    serving,
)
from agentic_middleware.tools import ServerTools

Seen = list[tuple[str, str, dict[str, str], bytes]]
ENVIRONMENT = [name for name in vars(environment).values() if isinstance(name, str) and name.startswith("AGENTIC_")]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the gateway's variables, before or after: `cli.main` writes them for its workers, and set once through
    monkeypatch each is removed again when the test ends."""
    for name in [*ENVIRONMENT, "PROMETHEUS_MULTIPROC_DIR"]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def echo(seen: Seen, name: str = "up") -> Starlette:
    """An upstream answering every path and method with what it received, and recording it."""

    async def answer(request: Request) -> Response:
        body = await request.body()
        seen.append(
            (
                request.method,
                request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                dict(request.headers),
                body,
            )
        )
        if request.method == "HEAD":
            return Response(b"", 200, headers={"content-length": "42", "x-request-id": "head"})
        if request.url.path == "/v1/messages/count_tokens":
            return JSONResponse({"input_tokens": 7}, headers={"request-id": "req_1"})
        if request.url.path.startswith("/v1/responses/"):
            return JSONResponse(_stored_response(request.url.path.rsplit("/", 1)[1]))
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "me",
                        "type": "model",
                        "display_name": name,
                        "created_at": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        )

    return Starlette(routes=[Route("/{path:path}", answer, methods=["GET", "POST", "DELETE", "HEAD", "PUT"])])


def _stored_response(response_id: str) -> dict[str, Any]:
    from agentic_middleware.testing import response

    return {**response("stored"), "id": response_id}


@asynccontextmanager
async def gateway_in_front_of(model: Any, config: Settings | Path = DEMO_CONFIG) -> AsyncIterator[str]:
    async with serving(create_app(config, model)) as url:
        yield url


async def test_every_other_path_goes_up_as_sent_under_the_official_sdks() -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream, gateway_in_front_of(Upstream(upstream), Settings()) as url:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client", max_retries=0) as gpt:
            models = await gpt.models.list()
            stored = await gpt.responses.retrieve("resp_123")
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-client", max_retries=0) as claude:
            counted = await claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        async with httpx.AsyncClient(base_url=url) as client:
            head = await client.head("/")
            query = await client.get("/v1/models?limit=2&after=a%20b")
            deleted = await client.delete("/v1/responses/resp_9")
    assert [model.id for model in models.data] == ["up"]
    assert stored.id == "resp_123" and stored.output_text == "stored"
    assert counted.input_tokens == 7
    assert (head.status_code, head.headers["content-length"], head.headers["x-request-id"]) == (200, "42", "head")
    assert query.status_code == deleted.status_code == 200
    assert [(method, path) for method, path, _, _ in seen] == [
        ("GET", "/v1/models"),
        ("GET", "/v1/responses/resp_123"),
        ("POST", "/v1/messages/count_tokens"),
        ("HEAD", "/"),
        ("GET", "/v1/models?limit=2&after=a%20b"),
        ("DELETE", "/v1/responses/resp_9"),
    ]
    assert seen[0][2]["authorization"] == "Bearer sk-client"
    assert seen[2][2]["authorization"] == "Bearer sk-ant-client"  # what this Anthropic SDK sends for its api_key
    assert seen[2][2]["anthropic-version"] and "x-stainless-lang" not in seen[2][2]  # API headers only


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_the_base_url_may_end_with_or_without_v1(suffix: str) -> None:
    seen: Seen = []
    async with (
        serving(echo(seen)) as upstream,
        gateway_in_front_of(Upstream(upstream + suffix), Settings()) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.get("/v1/models")
        await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert [path for _, path, _, _ in seen] == ["/v1/models", "/v1/chat/completions"]


CLIMBING = ["/v1/../admin", "/v1/%2e%2e/admin", "/v1/./models", "/v1/%2E%2E/x", "/v1/x/.."]
CLIMBING += ["/v1/%5c..%5cadmin", "/v1/%5C..%5C%5C..%5Cx", "/v1/..%5cadmin", "/v1/x/%2e%2e%5C"]  # `\` as `/` (WHATWG)
CLIMBING += ["/v1/..;/admin", "/v1/%2e%2e;x/admin", "/v1/.;/models"]  # `;` parameters dropped (Tomcat)
CLIMBING += ["/v1/..%09/admin", "/v1/.%0d./admin"]  # tabs and newlines removed (WHATWG, urllib.parse)


@pytest.mark.parametrize("path", CLIMBING)
async def test_a_path_that_climbs_out_of_the_base_is_refused(path: str) -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream, gateway_in_front_of(Upstream(f"{upstream}/api/v1"), Settings()) as url:
        status, body = await asyncio.to_thread(raw_get, url, path)  # sent as written: HTTP clients drop dot segments
    assert status == 400 and b"segments" in body
    assert seen == []


def raw_get(url: str, path: str) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


async def test_an_upstream_key_replaces_the_clients_and_the_client_key_never_goes_up() -> None:
    seen: Seen = []
    async with (
        serving(echo(seen)) as upstream,
        gateway_in_front_of(Upstream(upstream, api_key="sk-operator"), Settings()) as url,
    ):
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sk-client", max_retries=0) as claude:
            await claude.models.list()
            await claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client", max_retries=0) as gpt:
            await gpt.models.list()
        async with httpx.AsyncClient(base_url=url) as client:
            await client.get("/v1/models", headers={"x-api-key": "sk-client"})  # the header the client used
            await client.get("/v1/models")  # no key: the OpenAI family's header
            await client.post("/v1/messages/count_tokens", json={})  # no key: Anthropic's
    keys = [
        {name: headers[name] for name in ("x-api-key", "authorization") if name in headers} for *_, headers, _ in seen
    ]
    assert keys == [
        {"authorization": "Bearer sk-operator"},
        {"authorization": "Bearer sk-operator"},
        {"authorization": "Bearer sk-operator"},
        {"x-api-key": "sk-operator"},
        {"authorization": "Bearer sk-operator"},
        {"x-api-key": "sk-operator"},
    ]
    assert all(b"sk-client" not in repr(headers).encode() for _, _, headers, _ in seen)


async def test_two_upstreams_split_by_api_family() -> None:
    to_anthropic: Seen = []
    to_openai: Seen = []
    async with (
        serving(echo(to_anthropic, "claude")) as anthropic_url,
        serving(echo(to_openai, "gpt")) as openai_url,
        gateway_in_front_of(Upstreams(Upstream(anthropic_url), Upstream(f"{openai_url}/v1")), Settings()) as url,
    ):
        async with anthropic.AsyncAnthropic(base_url=url, api_key="a", max_retries=0) as claude:
            claude_models = await claude.models.list()  # the SDK's anthropic-version header picks Anthropic's server
            await claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="o", max_retries=0) as gpt:
            gpt_models = await gpt.models.list()
    assert [model.id for model in claude_models.data] == ["claude"]
    assert [model.id for model in gpt_models.data] == ["gpt"]
    assert [path for _, path, _, _ in to_anthropic] == ["/v1/models", "/v1/messages/count_tokens"]
    assert [path for _, path, _, _ in to_openai] == ["/v1/models"]


def test_flags_and_variables_build_the_upstreams(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Any] = []
    monkeypatch.setattr(cli, "_serve", served.append)
    monkeypatch.setenv("AGENTIC_PORT", "9123")
    monkeypatch.setenv("AGENTIC_OPENAI_UPSTREAM", "http://gpt.test/v1")
    monkeypatch.setenv("AGENTIC_UPSTREAM_API_KEY", "sk-op")
    assert cli.main(["--anthropic-upstream", "http://claude.test"]) == 0
    (args,) = served
    assert (args.port, args.host, args.workers) == (9123, "127.0.0.1", 1)
    model = environment.model_from_env()
    assert isinstance(model, Upstreams)
    assert (model.anthropic.root, model.openai.root) == ("http://claude.test", "http://gpt.test")
    assert model.anthropic.api_key == model.openai.api_key == "sk-op"
    assert environment.config_path() is None  # in front of an upstream without --config: no server tools


@pytest.mark.parametrize(
    ("argv", "variables", "message"),
    [
        (["--upstream", "localhost:8000"], {}, "AGENTIC_UPSTREAM: the upstream must be an http(s) URL"),
        (
            ["--anthropic-upstream", "http://a.test"],
            {},
            "neither --openai-upstream / AGENTIC_OPENAI_UPSTREAM nor --upstream / AGENTIC_UPSTREAM",
        ),
        (
            ["--upstream", "http://a.test", "--host", "0.0.0.0"],
            {"AGENTIC_UPSTREAM_API_KEY": "k"},
            "set AGENTIC_GATEWAY_API_KEYS",
        ),
        (
            ["--upstream", "http://a.test", "--host", "0.0.0.0"],
            {"AGENTIC_UPSTREAM_API_KEY": "k", "AGENTIC_GATEWAY_API_KEYS": " , "},
            "AGENTIC_GATEWAY_API_KEYS is set but holds no key",
        ),
        (["--config", "/no/such.yaml"], {}, "cannot read config /no/such.yaml"),
        (["--upstream", "http://u:pw-secret@a.test/v1"], {}, "the upstream URL must not hold credentials"),
    ],
)
def test_a_bad_start_stops_with_one_line(
    argv: list[str],
    variables: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "_serve", lambda args: pytest.fail("served"))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "pw-secret" not in err  # a URL's password is not echoed


def test_bad_numbers_are_flag_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "_serve", lambda args: pytest.fail("served"))
    monkeypatch.setenv("AGENTIC_WORKERS", "0")
    with pytest.raises(SystemExit) as stopped:
        cli.main([])
    assert stopped.value.code == 2 and "--workers: must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:  # not uvicorn's traceback at bind time
        cli.main(["--workers", "1", "--port", "99999"])
    assert stopped.value.code == 2 and "--port: must be at most 65535" in capsys.readouterr().err


async def test_gateway_keys_are_required_when_set_and_health_stays_open(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream:
        monkeypatch.setenv("AGENTIC_UPSTREAM", upstream)
        monkeypatch.setenv("AGENTIC_UPSTREAM_API_KEY", "sk-operator")
        monkeypatch.setenv("AGENTIC_GATEWAY_API_KEYS", "team-a, team-b")
        async with serving(environment.app_from_env()) as url:
            async with anthropic.AsyncAnthropic(base_url=url, api_key="wrong", max_retries=0) as claude:
                with pytest.raises(anthropic.AuthenticationError) as refused:
                    await claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="team-b", max_retries=0) as gpt:
                await gpt.models.list()
                with pytest.raises(openai.AuthenticationError):
                    await gpt.with_options(api_key="team-c").chat.completions.create(model="m", messages=[])
            async with httpx.AsyncClient(base_url=url) as client:
                health = await client.get("/health")
                metrics = await client.get("/metrics")
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "a valid gateway API key is required"},
    }
    assert health.json() == {"status": "ok"} and metrics.status_code == 401
    assert [(method, path, headers["authorization"]) for method, path, headers, _ in seen] == [
        ("GET", "/v1/models", "Bearer sk-operator")
    ]


def test_built_in_tools_by_name_in_the_yaml(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "agentic_middleware:\n  builtin_tools:\n    compression: {threshold: 100, ttl: 3600}\n"
        "    web_search: {backend: searxng, url: 'http://searx.test', max_results: 3}\n"
    )
    compression, search = load_config(config).hooks
    assert isinstance(compression, CompressionHook) and compression.threshold == 100 and compression.ttl == 3600
    assert isinstance(search, ServerTools) and [getattr(tool, "name", None) for tool in search.tools] == ["web_search"]
    for text, message in [
        ("{websearch: {}}", "unknown built-in tool 'websearch' (known: web_search, compression)"),
        ("{web_search: {backend: bing}}", "backend must be one of corpus, searxng, tavily, got 'bing'"),
        ("{web_search: {backend: tavily}}", "the tavily backend needs url"),
        ("{web_search: {colour: red}}", "unexpected keyword argument 'colour'"),
        ("{compression: {threshold: 0}}", "threshold must be a positive integer"),
        ("{compression: {ttl: 0}}", "ttl must be a number of seconds above 0, got 0"),
        ("{compression: {ttl: .inf}}", "ttl must be a number of seconds above 0, got inf"),
        ("[web_search]", "must be a mapping of tool name to options"),
    ]:
        config.write_text(f"agentic_middleware:\n  builtin_tools: {text}\n")
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            load_config(config)


async def test_metrics_count_rounds_tools_requests_and_loop_time() -> None:
    config = Path(__file__).parent / "gateway_search.yaml"
    async with gateway_in_front_of(DemoModel(), config) as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0) as claude:
            for question in ("Who created Git?", "Hello"):
                await claude.messages.create(
                    model="demo", max_tokens=50, messages=[{"role": "user", "content": question}]
                )
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as gpt:
            await gpt.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Who created Git?"}])
        async with httpx.AsyncClient(base_url=url) as client:
            await client.get("/v1/models")  # the demo model has no such route: not a loop, not counted
            scraped = await client.get("/metrics")
    assert scraped.headers["content-type"].startswith("text/plain; version=")
    text = scraped.text
    expected = {
        'agentic_rounds_total{outcome="rerun",route="messages"}': 1.0,
        'agentic_rounds_total{outcome="finished",route="messages"}': 2.0,
        'agentic_rounds_total{outcome="rerun",route="chat_completions"}': 1.0,
        'agentic_requests_total{ended_by="finished",route="messages"}': 2.0,
        'agentic_looped_requests_total{route="messages"}': 1.0,
        'agentic_reruns_total{route="messages"}': 1.0,
        'agentic_tool_calls_total{outcome="rerun",route="messages",tool="web_search"}': 1.0,
        'agentic_tool_calls_total{outcome="rerun",route="chat_completions",tool="web_search"}': 1.0,
        'agentic_loop_seconds_count{route="messages"}': 2.0,
        "agentic_live_streams": 0.0,
    }
    for series, value in expected.items():
        assert f"{series} {value}\n" in text, (series, text)
    assert float(re.search(r'agentic_loop_seconds_sum\{route="messages"\} (\S+)', text)[1]) > 0  # type: ignore[index]


async def test_live_streams_in_flight_are_a_gauge() -> None:
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        await request.body()

        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
            await release.wait()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    upstream_app = Starlette(routes=[Route("/v1/chat/completions", slow, methods=["POST"])])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        serving(upstream_app) as upstream,
        gateway_in_front_of(Upstream(upstream), Settings()) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        async with client.stream("POST", "/v1/chat/completions", json=body) as streaming:
            chunks = streaming.aiter_bytes()
            first = await anext(chunks)
            during = (await client.get("/metrics")).text
            release.set()
            async for _ in chunks:
                pass
        after = (await client.get("/metrics")).text
    assert first.startswith(b"data: ")
    assert "agentic_live_streams 1.0\n" in during
    assert "agentic_live_streams 0.0\n" in after


def test_the_demo_config_is_the_default_only_in_front_of_the_demo_model() -> None:
    assert environment.config_path() == DEMO_CONFIG
    assert isinstance(environment.model_from_env(), DemoModel)
    assert model_app(DemoModel()).routes  # the demo model answers 404 and 405 itself: nothing forwarded
