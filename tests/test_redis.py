"""The state kept between requests on a real Redis: two gateway processes under uvicorn share one, behind a load
balancer's worth of round-robin (a turn on one, its follow-up on the other), in front of a Responses app that stores
like OpenAI, per key (tests/storing.py).

Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it) and the `redis` package
(the test group has it): else these tests skip, saying why. Each test starts its own server on a free loopback port,
without persistence, and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from storing import StoringModel, app_of

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.compression import KIND, CompressionHook
from agentic_middleware.config import load_config
from agentic_middleware.errors import ConfigurationError
from agentic_middleware.gateway import serving
from agentic_middleware.store import CallerState, StoreUnavailable
from agentic_middleware.testing import function_call, response

redis = pytest.importorskip(
    "redis", reason="the redis package is not installed (pip install 'agentic-middleware[redis]')"
)
REDIS_SERVER = shutil.which("redis-server")

from agentic_middleware.redis import RedisChainStore, RedisStore  # noqa: E402  (after the skip: needs redis)

ROOT = Path(__file__).parent.parent
LONG = "".join(f"line {n}: the quarterly report says revenue grew. " for n in range(120))  # above 4,000 chars
KEY = "client-key"
STUB_KEY = re.compile(r"key (c[0-9a-f]{16});")


class RedisServer:
    """A `redis-server` on 127.0.0.1 on a port of its own, without persistence; `stop`, `start` (same port, empty),
    `pause` (SIGSTOP: it accepts connections and never answers) and `resume`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert REDIS_SERVER is not None
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            assert self.process.poll() is None, "redis-server stopped at start"
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused server cannot end
            self.process.kill()
            self.process.wait(10)

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not on the PATH (apt-get install redis-server; .ci/run installs it)")
    server = RedisServer(_free_port())  # never 6379: a developer's own Redis is not ours
    server.start()
    try:
        yield server
    finally:
        server.stop()


def answer_of(store: StoringModel) -> Any:
    """The scripted model: a context holding a compression stub gets a `retrieve` call for its key, unless the
    request ends on that call's output, which the answer quotes (`Quoted: <its first 30 characters>`)."""
    calls = iter(range(10**6))

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        last = items[-1]
        if last.get("type") == "function_call_output":
            return response(f"Quoted: {last['output'][:30]}")
        context = [*store.stored.get(body.get("previous_response_id"), []), *items]
        keys = STUB_KEY.findall(json.dumps(context))
        if keys:
            return response(function_call("retrieve", {"key": keys[-1]}, f"call_{next(calls)}"))
        return response("Nothing to quote.")

    return answer


def history() -> list[dict[str, Any]]:
    """A long document in an earlier turn (stubbed by the compression hook), then the question."""
    return [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Quote the report."},
    ]


def config_file(folder: Path, redis_url: str | None, timeout: float = 1.0) -> Path:
    lines = ["agentic_middleware:", "  hooks: [agentic_middleware.compression.compression_hook]"]
    if redis_url is not None:
        lines.append(f"  chain_store: {{redis: {redis_url}, timeout: {timeout}}}")
    path = folder / ("redis.yaml" if redis_url else "memory.yaml")
    path.write_text("\n".join(lines) + "\n")
    return path


class Gateway:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def client(self, api_key: str = KEY) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0, timeout=30)

    def logged(self) -> str:
        return self.log.read_text()


@contextlib.asynccontextmanager
async def gateways(config: Path, upstream: str, folder: Path, count: int = 2) -> AsyncIterator[list[Gateway]]:
    """`count` gateway processes (`python -m agentic_middleware.gateway`) on free ports, one config, one upstream."""
    processes: list[subprocess.Popen[bytes]] = []
    started: list[Gateway] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        for number in range(count):
            log = folder / f"gateway-{config.stem}-{number}.log"
            argv = [sys.executable, "-m", "agentic_middleware.gateway", "--upstream", f"{upstream}/v1"]
            argv += ["--config", str(config), "--port", "0", "--no-access-log"]
            with log.open("wb") as out:
                processes.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
            started.append(Gateway("", log))
        for gateway, process in zip(started, processes, strict=True):
            deadline = time.monotonic() + 60
            while not (found := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", gateway.logged())):
                assert process.poll() is None, gateway.logged()
                assert time.monotonic() < deadline, gateway.logged()
                await asyncio.sleep(0.05)
            gateway.url = found[1]
        yield started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                await asyncio.to_thread(process.wait, 20)
            except subprocess.TimeoutExpired:
                process.kill()


async def live_turn(gateway: Gateway) -> Any:
    """A streamed turn: its id is the first round's (the one holding the retrieve call), so a record is kept."""
    async with gateway.client() as client, client.responses.stream(model="m", input=history()) as events:
        async for _ in events:
            pass
        return await events.get_final_response()


@pytest.mark.parametrize("shared", ["redis", "in-process"])
async def test_a_live_turn_on_one_gateway_and_its_follow_up_on_the_other(
    shared: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    config = config_file(tmp_path, redis_server.url if shared == "redis" else None)
    async with serving(app) as upstream, gateways(config, upstream, tmp_path) as (first, second):
        turn = await live_turn(first)
        assert turn.output_text == f"Quoted: {LONG[:30]}"  # the first gateway ran retrieve within the turn
        assert turn.id == store.answers[0]["id"]  # a live stream's id: the first round's, with the call unanswered

        async with second.client() as client:
            if shared == "in-process":  # the record is in the first process: the app refuses the chain
                with pytest.raises(openai.BadRequestError, match="No tool output found for function call"):
                    await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
                return
            follow_up = await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)

    # The second gateway chained from the turn's last response, from the record on Redis...
    assert store.model.requests[2].body["previous_response_id"] == store.answers[1]["id"]
    # ...and its model asked for the stubbed text again: served from the stash the first gateway kept on Redis.
    assert follow_up.output_text == f"Quoted: {LONG[:30]}"
    assert store.contexts[-1][-1]["output"] == LONG


@pytest.mark.parametrize("shared", ["redis", "in-process"])
async def test_a_compression_stash_written_on_one_gateway_is_retrieved_on_the_other(
    shared: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    config = config_file(tmp_path, redis_server.url if shared == "redis" else None)
    async with serving(app) as upstream, gateways(config, upstream, tmp_path) as (first, second):
        async with first.client() as client:
            turn = await client.responses.create(model="m", input=history())  # JSON: its id is its last response's
        assert LONG not in json.dumps(store.contexts[0])  # the app stored the stub, not the text
        async with second.client() as client:
            follow_up = await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)

    if shared == "in-process":  # the second process kept nothing: retrieve is not declared, its call not served
        assert [item.type for item in follow_up.output] == ["function_call"]
        assert follow_up.output[0].name == "retrieve"  # type: ignore[union-attr]
        return
    assert follow_up.output_text == f"Quoted: {LONG[:30]}"
    assert [tool["name"] for tool in store.model.requests[2].body["tools"]] == ["retrieve"]
    assert store.contexts[-1][-1]["output"] == LONG


async def test_redis_stopped_mid_run_degrades_as_documented_and_recovers(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    config = config_file(tmp_path, redis_server.url)
    async with serving(app) as upstream, gateways(config, upstream, tmp_path) as (first, second):
        turn = await live_turn(first)
        redis_server.stop()

        async with asyncio.timeout(30), second.client() as client:  # never a hang
            # The record cannot be read: the follow-up goes as sent, and the app refuses it as without a record.
            with pytest.raises(openai.BadRequestError, match="No tool output found for function call"):
                await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
            # A DELETE must know whether a record exists: 503 in the route's shape, to be retried.
            with pytest.raises(openai.APIStatusError) as refused:
                await client.responses.delete(turn.id)
            assert refused.value.status_code == 503
            assert refused.value.code == "chains_unavailable"
            # A new turn still gets its answer: the stash stays in the request.
            again = await live_turn(second)
            assert again.output_text == f"Quoted: {LONG[:30]}"
            with pytest.raises(openai.BadRequestError):  # its record could not be kept: as without a record
                await client.responses.create(model="m", input="Twice more.", previous_response_id=again.id)

        logged = second.logged()
        assert logged.count("the chain store failed to read") == 1, logged  # once, however many requests fail
        assert logged.count("the chain store failed to record") == 1, logged
        assert logged.count("the compression stash failed to keep") == 1, logged

        redis_server.start()  # back, empty: the gateways reconnect
        turn = await live_turn(first)
        async with second.client() as client:
            follow_up = await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
        assert follow_up.output_text == f"Quoted: {LONG[:30]}"
        assert "the chain store answers again" in second.logged()


async def test_a_stalled_redis_is_bounded_by_the_timeout(redis_server: RedisServer, tmp_path: Path) -> None:
    """A Redis that accepts connections and never answers (SIGSTOP) costs each request the timeout, no more."""
    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    config = config_file(tmp_path, redis_server.url, timeout=0.3)
    async with serving(app) as upstream, gateways(config, upstream, tmp_path, count=1) as (gateway,):
        turn = await live_turn(gateway)
        redis_server.pause()
        try:
            async with asyncio.timeout(30), gateway.client() as client:
                with pytest.raises(openai.BadRequestError, match="No tool output found for function call"):
                    await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
        finally:
            redis_server.resume()
    assert "the chain store failed to read (StoreUnavailable: Redis at 127.0.0.1" in gateway.logged()
    assert "no answer in time" in gateway.logged()


async def test_records_and_stashes_on_redis_are_the_callers_own(redis_server: RedisServer, tmp_path: Path) -> None:
    """Another API key on the other gateway finds neither the record nor the stash of the first key's turn."""
    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    config = config_file(tmp_path, redis_server.url)
    async with serving(app) as upstream, gateways(config, upstream, tmp_path) as (first, second):
        turn = await live_turn(first)
        async with second.client(api_key="another-key") as client:
            with pytest.raises(openai.NotFoundError):  # the app's own answer to another key: no record rewrote it
                await client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
    assert store.model.requests[-1].body["previous_response_id"] == turn.id
    client_redis = redis.Redis.from_url(redis_server.url)
    keys = sorted(key.decode() for key in client_redis.keys("*"))
    client_redis.close()
    assert len(keys) == 3 and all(key.startswith("agentic:") for key in keys)  # a record, a text, the marker
    assert not any(KEY in key for key in keys)  # the caller's part is a hash


async def test_the_redis_store_puts_gets_expires_and_deletes(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, prefix="t:")
    await store.put("a", b"one", 60)
    await store.put("b", b"two", 0.05)
    assert await store.get("a") == b"one" and await store.get("missing") is None
    await asyncio.sleep(0.2)
    assert await store.get("b") is None  # its time to live ran out
    await store.delete("a")
    assert await store.get("a") is None
    redis_server.stop()
    with pytest.raises(StoreUnavailable, match=re.escape("Redis at 127.0.0.1")):
        await store.get("a")
    await store.aclose()


async def test_a_hook_state_on_redis_is_keyed_by_caller(redis_server: RedisServer) -> None:
    shared = RedisStore(redis_server.url)
    mine = CallerState(shared, {"headers": [(b"authorization", b"Bearer one")]})
    theirs = CallerState(shared, {"headers": [(b"authorization", b"Bearer two")]})
    await mine.put(KIND, "c1", "my text", 60)
    assert await mine.get(KIND, "c1") == "my text"
    assert await theirs.get(KIND, "c1") is None
    await shared.aclose()


def test_yaml_chain_store_redis_builds_a_redis_chain_store(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("agentic_middleware:\n  chain_store: {redis: 'redis://127.0.0.1:1/0', prefix: 'x:', ttl: 60}\n")
    chains = load_config(path).chain_store
    assert isinstance(chains, RedisChainStore) and chains.ttl == 60 and chains.store.prefix == "x:"  # type: ignore[attr-defined]
    middleware = AgenticLoopMiddleware(StoringModel(lambda body: {}).model, config=path)
    assert middleware.chains is not None and isinstance(middleware.chains.store, RedisChainStore)
    assert middleware.setup.state is middleware.chains.store.store  # the hooks' state is on the same Redis


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("{redis: 5}", "must be true, false or {redis: URL}"),
        ("{redis: 'redis://h', db: 2}", "unknown keys ['db']"),
        ("{redis: 'http://h'}", "not a Redis URL"),
        ("{redis: 'redis://h', timeout: 0}", "timeout must be a number of seconds above 0"),
        ("'redis://h'", "must be true, false or {redis: URL}"),
    ],
)
def test_a_wrong_yaml_chain_store_stops_the_start(value: str, error: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"agentic_middleware:\n  chain_store: {value}\n")
    with pytest.raises(ConfigurationError, match=re.escape(error)):
        load_config(path)


def test_without_the_redis_package_the_import_names_the_extra() -> None:
    code = "import sys; sys.modules['redis'] = None; import agentic_middleware.redis"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 1 and "pip install 'agentic-middleware[redis]'" in done.stderr, done.stderr


def test_a_redis_chain_store_serves_each_event_loop_it_is_used_in(redis_server: RedisServer) -> None:
    """Starlette's TestClient (not entered) runs each request in an event loop of its own, as a test suite with a
    loop per test does with a module's app: the store's connections of one loop must not serve the next."""
    from starlette.testclient import TestClient

    store = StoringModel(lambda body: answer(body))
    answer = answer_of(store)
    app, _ = app_of(store)
    gateway = AgenticLoopMiddleware(app, hooks=[CompressionHook()], chain_store=RedisChainStore(redis_server.url))
    client = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=TestClient(gateway), max_retries=0)
    with client.responses.stream(model="m", input=history()) as events:
        turn = events.get_final_response()
    assert turn.id == store.answers[0]["id"]  # a live stream's id: a record is kept on Redis
    follow_up = client.responses.create(model="m", input="Once more.", previous_response_id=turn.id)
    assert store.model.requests[2].body["previous_response_id"] == store.answers[1]["id"]  # chained from the record
    assert follow_up.output_text == f"Quoted: {LONG[:30]}"  # and the stash kept on Redis served the retrieve


async def test_a_ttl_past_what_redis_can_count_keeps_the_value(redis_server: RedisServer) -> None:
    chains = RedisChainStore(redis_server.url, ttl=1e17)  # "forever": Redis's PX cannot hold that many ms
    await chains.put("k", {"previous_response_id": "r", "input": [], "caller": "-"})
    assert await chains.get("k") == {"previous_response_id": "r", "input": [], "caller": "-"}
    state = CallerState(chains.store, {"headers": [(b"authorization", b"Bearer one")]})
    await state.put(KIND, "c1", "text", math.inf)  # a hook's ttl is the hook's: the store takes any
    assert await state.get(KIND, "c1") == "text"
    await chains.store.aclose()


async def test_a_redis_url_that_decodes_responses_still_serves_records(redis_server: RedisServer) -> None:
    chains = RedisChainStore(redis_server.url + "?decode_responses=true")  # redis-py's option, in the URL
    await chains.put("k", {"previous_response_id": "r", "input": [], "caller": "-"})
    assert await chains.get("k") == {"previous_response_id": "r", "input": [], "caller": "-"}
    await chains.store.aclose()


async def test_a_tls_url_to_a_redis_without_tls_says_tls(redis_server: RedisServer) -> None:
    """A handshake a plain Redis never answers: the error names TLS, so the operator looks at the URL's scheme."""
    store = RedisStore(redis_server.url.replace("redis://", "rediss://"), timeout=0.3)
    with pytest.raises(StoreUnavailable, match=re.escape(f"Redis at 127.0.0.1:{redis_server.port} over TLS failed")):
        await store.get("a")


async def test_a_state_kind_with_a_colon_cannot_reach_another_callers_keys(redis_server: RedisServer) -> None:
    shared = RedisStore(redis_server.url)
    alice = CallerState(shared, {"headers": [(b"authorization", b"Bearer alice")]})
    mallory = CallerState(shared, {"headers": [(b"authorization", b"Bearer mallory")]})
    await alice.put("notes", f"{await mallory.who()}:n", "alice's", 60)  # a name may hold anything: it comes last
    with pytest.raises(ValueError, match="kind must be a non-empty string without ':'"):
        await mallory.get(f"notes:{await alice.who()}", "n")  # would be alice's key
    assert await mallory.get("notes", f"{await alice.who()}:n") is None
    await shared.aclose()
