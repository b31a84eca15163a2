"""The gateway's edges (issue 24's leftovers): rerun retries in `/metrics`, Azure's `api-key`, WebSockets under a
server that hands them on, error messages that name the flag and its variable, a port in use, and the metrics
folder of `--workers N` removed at exit. Upstreams and the gateway run under uvicorn (hypercorn where said) on
127.0.0.1, or the command as a subprocess."""

from __future__ import annotations

import asyncio
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets
from servers import serving as serving_with
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from test_gateway_paths import ENVIRONMENT, Seen, echo, gateway_in_front_of

from agentic_middleware import Settings
from agentic_middleware.gateway import DemoModel, Upstream, cli, create_app, model_app, serving
from agentic_middleware.gateway.access import RequireKey
from agentic_middleware.testing import ScriptedModel, message, tool_use

ROOT = Path(__file__).parent.parent
SEARCH_CONFIG = Path(__file__).parent / "gateway_search.yaml"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*ENVIRONMENT, "PROMETHEUS_MULTIPROC_DIR"]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def command_environment(**extra: str) -> dict[str, str]:
    """This environment without the gateway's variables, plus `extra`, for the command as a subprocess."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith(("AGENTIC_", "PROMETHEUS_"))}
    return {**kept, **extra}


async def test_metrics_count_a_reruns_retry_after_a_529() -> None:
    overloaded = JSONResponse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        529,
        headers={"retry-after-ms": "1"},
    )
    model = ScriptedModel(message(tool_use("web_search", {"query": "git"})), overloaded, message("Linus Torvalds."))
    async with serving(model) as upstream, gateway_in_front_of(Upstream(upstream), SEARCH_CONFIG) as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0) as claude:
            answer = await claude.messages.create(
                model="m", max_tokens=50, messages=[{"role": "user", "content": "Who created Git?"}]
            )
        async with httpx.AsyncClient(base_url=url) as client:
            text = (await client.get("/metrics")).text
    assert answer.content[0].type == "text" and answer.content[0].text == "Linus Torvalds."
    assert len(model.requests) == 3  # the first call, the rerun answered 529, its retry
    assert 'agentic_rerun_retries_total{route="messages"} 1.0\n' in text, text
    assert 'agentic_reruns_total{route="messages"} 1.0\n' in text


def _keys(seen: Seen) -> list[dict[str, str]]:
    names = ("api-key", "x-api-key", "authorization")
    return [{name: headers[name] for name in names if name in headers} for _, _, headers, _ in seen]


async def test_azures_api_key_goes_up_and_an_upstream_key_replaces_it() -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream:
        for model in (Upstream(upstream), Upstream(upstream, api_key="sk-operator")):
            async with gateway_in_front_of(model, Settings()) as url:
                azure = openai.AsyncAzureOpenAI(
                    azure_endpoint=url, api_key="sk-client", api_version="2024-10-21", max_retries=0
                )
                async with azure:
                    await azure.models.list()
    assert [path for _, path, _, _ in seen] == ["/openai/models?api-version=2024-10-21"] * 2
    assert _keys(seen) == [{"api-key": "sk-client"}, {"api-key": "sk-operator"}]


async def test_gateway_keys_are_taken_from_azures_api_key_too() -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream:
        app = create_app(Settings(), Upstream(upstream))
        app.add_middleware(RequireKey, keys=(b"gw-key",))
        async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
            allowed = await client.get("/openai/models", headers={"api-key": "gw-key"})
            refused = await client.get("/openai/models", headers={"api-key": "other"})
    assert (allowed.status_code, refused.status_code) == (200, 401)
    assert len(seen) == 1


async def test_a_websocket_under_hypercorn_is_refused_with_a_426_and_nothing_goes_up() -> None:
    seen: Seen = []
    async with (
        serving(echo(seen)) as upstream,
        serving_with("hypercorn", create_app(Settings(), Upstream(upstream))) as gateway,
    ):
        for path in ("/v1/messages", "/v1/models", "/health"):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(f"ws://127.0.0.1:{gateway.port}{path}", open_timeout=10):
                    pass
            assert refused.value.response.status_code == 426, path  # Codex then falls back to HTTP at once
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.port}") as client:
            assert (await client.get("/v1/models")).status_code == 200  # the gateway still serves HTTP
    assert [path for _, path, _, _ in seen] == ["/v1/models"]


@pytest.mark.parametrize(
    ("variables", "argv", "message"),
    [
        ({}, ["--upstream", "localhost:1234"], "--upstream / AGENTIC_UPSTREAM: the upstream must be an http(s) URL"),
        ({"AGENTIC_UPSTREAM": "localhost:1234"}, [], "--upstream / AGENTIC_UPSTREAM: the upstream must be"),
        (
            {},
            ["--anthropic-upstream", "http://127.0.0.1:1"],
            "--anthropic-upstream / AGENTIC_ANTHROPIC_UPSTREAM is set but neither --openai-upstream / "
            "AGENTIC_OPENAI_UPSTREAM nor --upstream / AGENTIC_UPSTREAM: where does the other API family go?",
        ),
        (
            {},
            ["--upstream", "http://127.0.0.1:1", "--openai-upstream", "ftp://x"],
            "--openai-upstream / AGENTIC_OPENAI_UPSTREAM: the upstream must be an http(s) URL",
        ),
    ],
)
def test_a_bad_upstream_is_named_by_its_flag_and_its_variable(
    variables: dict[str, str],
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cli, "_serve", lambda args: pytest.fail("the gateway must not start"))
    assert cli.main(["--port", "0", *argv]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"agentic-gateway: error: {message}") and error.count("\n") == 1, error


@pytest.mark.parametrize("value", ["2147483648", "99999999999999999999"])
@pytest.mark.parametrize("given_by", ["flag", "variable"])
def test_a_gc_threshold_past_what_the_collector_takes_is_refused_before_any_worker_starts(
    value: str, given_by: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gc.set_threshold` takes a C int: a larger value passed the parser, and every worker (re)started by uvicorn's
    supervisor died with an OverflowError traceback, again and again."""
    monkeypatch.setattr(cli, "_serve", lambda args: pytest.fail("the gateway must not start"))
    argv = ["--port", "0", "--workers", "2"]
    if given_by == "flag":
        argv += ["--gc-threshold", value]
    else:
        monkeypatch.setenv("AGENTIC_GC_THRESHOLD", value)
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --gc-threshold: must be at most 2147483647, got {value}" in error, error
    assert "Traceback" not in error


def test_a_port_in_use_is_one_line_of_ours_and_exit_status_3() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            argv = [sys.executable, "-m", "agentic_middleware.gateway", "--port", str(port), "--workers", workers]
            done = subprocess.run(argv, cwd=ROOT, env=command_environment(), capture_output=True, text=True, timeout=60)
            assert done.returncode == 3, done.stderr
            assert done.stderr == f"agentic-gateway: error: cannot listen on 127.0.0.1:{port}: address already in use\n"
            assert done.stdout == ""  # no "gateway on ..." line for a gateway that never listened


def test_the_metrics_folder_of_workers_is_removed_at_exit(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "agentic_middleware.gateway", "--port", "0", "--workers", "2", "--no-access-log"]
    environment = command_environment(TMPDIR=str(tmp_path))
    gateway = subprocess.Popen(
        argv, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    started = threading.Event()
    log: list[str] = []

    def read() -> None:
        assert gateway.stderr is not None
        for line in gateway.stderr:
            log.append(line)
            if sum("Application startup complete" in seen for seen in log) == 2:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(60), "".join(log)
        folders = list(tmp_path.glob("agentic-gateway-metrics-*"))
        assert len(folders) == 1 and folders[0].is_dir()  # the workers' metrics live there while they run
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(60) == 0, "".join(log)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
        reader.join(10)
    assert list(tmp_path.glob("agentic-gateway-metrics-*")) == []


MODEL_LOOKALIKES = ["/v1/messages/..", "/v1/messages/%2e%2e/admin", "/v1/chat/completions/..%5Cadmin"]
MODEL_LOOKALIKES += ["/v1/responses/.;/x", "/v1/%2e%2e/v1/messages", "/v1/messages/.%09./x"]


@pytest.mark.parametrize("path", MODEL_LOOKALIKES)
async def test_a_post_to_a_model_routes_path_that_climbs_is_refused_and_nothing_goes_up(path: str) -> None:
    """The model routes' own paths take a shorter way to the upstream (no segment check, a URL built once); a path
    that begins like one and climbs is still refused, `..` encoded or behind a backslash included."""
    seen: Seen = []
    async with serving(echo(seen)) as upstream, gateway_in_front_of(Upstream(f"{upstream}/api/v1"), Settings()) as url:
        status, body = await asyncio.to_thread(raw_post, url, path)
    assert status == 400 and b"segments" in body
    assert seen == []


async def test_a_model_routes_path_goes_up_as_written_with_its_query() -> None:
    seen: Seen = []
    async with serving(echo(seen)) as upstream, gateway_in_front_of(Upstream(f"{upstream}/api/v1"), Settings()) as url:
        answers = [await asyncio.to_thread(raw_post, url, path) for path in ("/v1/messages?beta=true", "/v1/messages")]
    assert [status for status, _ in answers] == [200, 200]
    assert [path for _, path, _, _ in seen] == ["/api/v1/messages?beta=true", "/api/v1/messages"]


async def test_an_http_exception_of_the_model_is_answered_in_the_routes_error_shape() -> None:
    class Refusing(DemoModel):
        async def __call__(self, request: Any, route: Any) -> Any:
            raise HTTPException(418, "not today")

    async with gateway_in_front_of(Refusing(), Settings()) as url, httpx.AsyncClient(base_url=url) as client:
        anthropic_shape = await client.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": []})
        openai_shape = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert anthropic_shape.status_code == openai_shape.status_code == 418
    assert anthropic_shape.json()["error"]["message"] == "not today" and anthropic_shape.json()["type"] == "error"
    assert openai_shape.json()["error"]["message"] == "not today"


def raw_post(url: str, path: str) -> tuple[int, bytes]:
    """A POST of a small Messages body to `path` sent as written (HTTP clients drop dot segments)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = b'{"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}'
    try:
        connection.request("POST", path, body, {"content-type": "application/json"})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


async def test_a_model_route_hands_its_model_the_body_sent_in_pieces_whole() -> None:
    """The model route reads the body itself (`ReadRequest`, for the loop's every round): a body in several ASGI
    messages (uvicorn hands a long one on so, and the middleware passes one over max_body_bytes on so) reaches the
    model whole, through `body()` and `stream()` alike; a client that leaves before its end never reaches it. The
    model routes alone, as the middleware calls them."""
    seen: list[tuple[str, bytes, bytes]] = []

    class Recording:
        async def __call__(self, request: Any, route: Any) -> JSONResponse:
            seen.append((route, await request.body(), b"".join([chunk async for chunk in request.stream()])))
            return JSONResponse({"ok": True})

        async def aclose(self) -> None:
            return None

    app = model_app(Recording())
    scope = {"type": "http", "method": "POST", "path": "/v1/messages", "raw_path": b"/v1/messages"}
    scope |= {"query_string": b"", "headers": [(b"content-type", b"application/json")], "root_path": ""}

    async def call(*messages: dict[str, Any]) -> list[dict[str, Any]]:
        pending, sent = list(messages), []

        async def receive() -> dict[str, Any]:
            return pending.pop(0) if pending else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({**scope, "headers": list(scope["headers"])}, receive, send)
        return sent

    pieces = [b'{"model": "m", ', b'"max_tokens": 9, ', b'"messages": []}']
    sent = await call(*({"type": "http.request", "body": p, "more_body": i < 2} for i, p in enumerate(pieces)))
    assert sent[0]["status"] == 200
    assert seen == [("messages", b"".join(pieces), b"".join(pieces))]
    # Gone before its body ended: nothing to answer and nothing raised (a traceback in the server's log each time)
    assert await call({"type": "http.request", "body": pieces[0], "more_body": True}) == []
    assert len(seen) == 1
