"""Follow-ups by `previous_response_id` after a Responses turn whose id names a stored response that still holds a
server call without its output (a live stream's id, `closing="text"`, a refused mixed turn): judged by the openai SDK
against an app that stores like OpenAI, which refuses such a chain with 400."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from typing import Any

import openai
import orjson
import pytest
from conftest import openai_client
from storing import StoringModel

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError
from agentic_middleware.chains import KeyValueChainStore, MemoryChainStore, chain_key
from agentic_middleware.gateway import serving
from agentic_middleware.store import MemoryStore
from agentic_middleware.testing import ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


CLIENT_TOOL = {"type": "function", "name": "client_fn", "parameters": {"type": "object", "properties": {}}}
FOLLOW_UP = "Follow-up answered."


def model_for(end: str) -> StoringModel:
    """A storing app whose turn ends as `end` says, and which answers any follow-up in words.

    "answer": one server call, then an answer; "cap": a new server call every round; "repeat": the same call every
    round; "mixed": a server call next to a client's call every round."""
    numbers = itertools.count()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("previous_response_id"):
            return response(FOLLOW_UP)
        number = next(numbers)
        key = "same" if end == "repeat" else str(number)
        if end == "answer" and number:
            return response("The value is v.")
        calls = [function_call("lookup", {"key": key}, f"call_s{number}")]
        if end == "mixed":
            calls.append(function_call("client_fn", {}, f"call_c{number}"))
        return response(*calls)

    return StoringModel(answer)


def closing_text_app(store: StoringModel, **options: Any) -> AgenticLoopMiddleware:
    """The middleware in front of `store`, refusing the second server call with `closing="text"`."""
    return AgenticLoopMiddleware(
        store.model, hooks=[ServerTools([lookup])], max_agentic_loops=1, closing="text", **options
    )


async def first_turn(client: openai.AsyncOpenAI, stream: bool, **options: Any) -> Any:
    """The first turn as the client gets it; a stream through the SDK's stream helper."""
    if not stream:
        return await client.responses.create(model="m", input="q", **options)
    async with client.responses.stream(model="m", input="q", **options) as events:
        return await events.get_final_response()


def outputs(items: list[Any]) -> list[tuple[str, str]]:
    return [(item["call_id"], item["output"]) for item in items if item.get("type") == "function_call_output"]


async def test_a_live_streams_id_chains_from_the_turns_last_response() -> None:
    store = model_for("answer")
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])]))

    first = await first_turn(client, stream=True)
    follow_up = await client.responses.create(model="m", input="and then?", previous_response_id=first.id)

    turn = store.answers[:2]
    assert first.output_text == "The value is v."
    assert first.id == turn[0]["id"]  # the first round's: the stream helper needs one id from its start
    assert follow_up.output_text == FOLLOW_UP
    rounds = [request.body for request in store.model.requests]
    assert rounds[-1]["previous_response_id"] == turn[1]["id"]
    assert rounds[-1]["input"] == [{"role": "user", "content": "and then?"}]  # the last response answered its call
    assert outputs(store.contexts[-1]) == [("call_s0", "value of 0")]  # the server's call and its output, once


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("end", ["cap", "repeat"])
async def test_closing_text_leaves_no_unanswered_call_to_the_follow_up(end: str, stream: bool) -> None:
    store = model_for(end)
    limit = 1 if end == "cap" else 2
    hooks = [ServerTools([lookup])]
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=hooks, max_agentic_loops=limit, closing="text"))

    first = await first_turn(client, stream)
    follow_up = await client.responses.create(model="m", input="and then?", previous_response_id=first.id)

    assert [item.type for item in first.output] == ["message"]  # closing_text: the refused call is not shown
    assert follow_up.output_text == FOLLOW_UP
    sent = store.model.requests[-1].body
    refused = "Not run: that request's budget of server tool calls was spent (max_agentic_loops=1)."
    if end == "repeat":
        refused = "Not run: the same call had already run in that request."
    assert sent["input"] == [
        {"type": "function_call_output", "call_id": "call_s1", "output": refused},
        {"role": "user", "content": "and then?"},
    ]
    assert first.id == store.answers[0 if stream else 1]["id"]  # a live stream's is its first round's
    assert sent["previous_response_id"] == store.answers[1]["id"]  # the turn's last response
    done = "value of 0" if end == "cap" else "value of same"
    assert outputs(store.contexts[-1]) == [("call_s0", done), ("call_s1", refused)]


async def test_a_closing_call_answered_with_a_call_anyway_leaves_no_unanswered_call_to_the_follow_up() -> None:
    store = model_for("cap")  # calls the tool even when the closing call turns tools off
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], max_agentic_loops=1))

    first = await client.responses.create(model="m", input="q")
    follow_up = await client.responses.create(model="m", input="and then?", previous_response_id=first.id)

    assert store.model.requests[2].body["tool_choice"] == "none" and first.id == store.answers[2]["id"]
    assert follow_up.output_text == FOLLOW_UP
    refused = "Not run: that request's budget of server tool calls was spent (max_agentic_loops=1)."
    assert outputs(store.model.requests[-1].body["input"]) == [("call_s2", refused)]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_refused_mixed_turns_follow_up_answers_the_servers_call_too(stream: bool) -> None:
    store = model_for("mixed")
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], max_agentic_loops=1))

    first = await first_turn(client, stream, tools=[CLIENT_TOOL])
    [call] = first.output
    assert (call.type, call.name, call.call_id) == ("function_call", "client_fn", "call_c1")  # type: ignore[union-attr]
    client_output = {"type": "function_call_output", "call_id": "call_c1", "output": "client result"}
    follow_up = await client.responses.create(
        model="m", input=[client_output], previous_response_id=first.id, tools=[CLIENT_TOOL]
    )

    assert follow_up.output_text == FOLLOW_UP
    refused = "Not run: that request's budget of server tool calls was spent (max_agentic_loops=1)."
    assert store.model.requests[-1].body["input"] == [
        {"type": "function_call_output", "call_id": "call_s1", "output": refused},
        client_output,
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_turn_with_store_false_records_nothing(stream: bool) -> None:
    chains = MemoryChainStore()
    store = model_for("cap")
    app = AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], max_agentic_loops=1, chain_store=chains)

    first = await first_turn(openai_client(app), stream, store=False)

    assert first.output_text and store.stored == {}
    assert len(chains) == 0


async def test_the_default_store_is_bounded_and_forgets_the_least_recently_used() -> None:
    chains = MemoryChainStore(max_entries=2)
    for name in "abc":
        await chains.put(name, {"previous_response_id": name, "input": []})
        if name == "b":
            assert await chains.get("a") is not None  # used: now the most recent
    assert [await chains.get(name) is not None for name in "abc"] == [True, False, True]
    assert len(chains) == 2


async def test_a_record_expires_after_its_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("agentic_middleware.store.time.monotonic", lambda: now[0])
    chains = MemoryChainStore(ttl=60)
    await chains.put("a", {"previous_response_id": "b", "input": []})
    now[0] += 59
    assert await chains.get("a") is not None
    now[0] += 2
    assert await chains.get("a") is None and len(chains) == 0


async def test_an_evicted_record_leaves_its_follow_up_as_before() -> None:
    store = model_for("cap")
    app = closing_text_app(store, chain_store=MemoryChainStore(max_entries=1))
    client = openai_client(app)

    older = await client.responses.create(model="m", input="q")
    newer = await client.responses.create(model="m", input="q")

    assert (await client.responses.create(model="m", input="?", previous_response_id=newer.id)).output_text
    with pytest.raises(openai.BadRequestError, match="No tool output found for function call"):
        await client.responses.create(model="m", input="?", previous_response_id=older.id)


async def test_without_a_chain_store_the_follow_up_fails_as_the_app_says() -> None:
    store = model_for("cap")
    app = closing_text_app(store, chain_store=False)
    client = openai_client(app)

    first = await client.responses.create(model="m", input="q")
    with pytest.raises(openai.BadRequestError, match="No tool output found for function call call_s1"):
        await client.responses.create(model="m", input="?", previous_response_id=first.id)


class SlowStore:
    """A store of its own, as a team would back one with Redis: plain JSON values, and a write that takes time."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.gets: list[str] = []

    async def get(self, response_id: str) -> dict[str, Any] | None:
        self.gets.append(response_id)
        value = self.values.get(response_id)
        return None if value is None else orjson.loads(value)

    async def put(self, response_id: str, chain: dict[str, Any]) -> None:
        await asyncio.sleep(0.2)
        self.values[response_id] = orjson.dumps(chain)


async def test_a_plugged_store_is_used_and_written_before_the_client_has_its_answer() -> None:
    chains = SlowStore()
    store = model_for("answer")
    app = AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], chain_store=chains)

    async with serving(app) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        first = await first_turn(client, stream=True)
        follow_up = await client.responses.create(model="m", input="and then?", previous_response_id=first.id)

    assert follow_up.output_text == FOLLOW_UP
    key = chain_key(hashlib.sha256(b"k").hexdigest(), first.id)  # bound to the caller: its key's hash
    assert list(chains.values) == [key] and chains.gets == [key]
    assert store.model.requests[-1].body["previous_response_id"] == store.answers[1]["id"]


class BrokenStore:
    async def get(self, response_id: str) -> dict[str, Any] | None:
        raise ConnectionError("store down")

    async def put(self, response_id: str, chain: dict[str, Any]) -> None:
        raise ConnectionError("store down")


async def test_a_failing_store_leaves_turns_and_follow_ups_as_they_were(caplog: pytest.LogCaptureFixture) -> None:
    store = model_for("cap")
    app = closing_text_app(store, chain_store=BrokenStore())
    client = openai_client(app)

    first = await client.responses.create(model="m", input="q")
    with pytest.raises(openai.BadRequestError, match="No tool output found"):
        await client.responses.create(model="m", input="?", previous_response_id=first.id)

    assert first.output_text
    assert "the chain store failed to record" in caplog.text and "the chain store failed to read" in caplog.text


async def test_a_follow_up_that_passes_through_is_rewritten_too() -> None:
    store = model_for("cap")
    app = closing_text_app(store, streaming=False)
    client = openai_client(app)

    first = await client.responses.create(model="m", input="q")
    async with client.responses.stream(model="m", input="?", previous_response_id=first.id) as events:
        follow_up = await events.get_final_response()

    assert follow_up.output_text == FOLLOW_UP
    assert store.model.requests[-1].body["input"][0]["call_id"] == "call_s1"


def test_a_chain_store_without_get_and_put_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="chain_store must be a store"):
        AgenticLoopMiddleware(model_for("answer").model, chain_store=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("field", "value"), [("conversation", "conv_1"), ("background", True)])
async def test_a_conversation_or_background_is_refused_before_the_app_is_called(
    stream: bool, field: str, value: Any
) -> None:
    model = ScriptedModel(response("never"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], streaming=True))

    with pytest.raises(openai.BadRequestError, match=f"{field} is not supported") as raised:
        await first_turn(client, stream, **{field: value})

    assert raised.value.code == "unsupported_parameter" and raised.value.param == field
    assert model.requests == []


class NoLoops:
    """An outer middleware that gives a request a loop limit of 0, as a gateway does for tenants without tools."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["max_agentic_loops"] = 0
        await self.app(scope, receive, send)


@pytest.mark.parametrize("where", ["middleware", "request.state"])
@pytest.mark.parametrize(("field", "value"), [("conversation", "conv_1"), ("background", True)])
async def test_a_request_that_cannot_loop_passes_with_conversation_or_background(
    where: str, field: str, value: Any
) -> None:
    model = ScriptedModel(response("as the app says"))
    limit = 0 if where == "middleware" else None
    app: Any = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=limit)
    client = openai_client(NoLoops(app) if where == "request.state" else app)

    answer = await client.responses.create(model="m", input="q", **{field: value})

    assert answer.output_text == "as the app says" and model.requests[0].body[field] == value


async def test_a_conversation_passes_through_where_no_hook_runs() -> None:
    model = ScriptedModel(response("as the app says"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[]))

    answer = await client.responses.create(model="m", input="q", conversation="conv_1")

    assert answer.output_text == "as the app says" and model.requests[0].body["conversation"] == "conv_1"


class OddStore:
    """A store whose records are of another shape (an older version's, or bytes a shared store forgot to parse)."""

    def __init__(self, record: Any) -> None:
        self.record = record

    async def get(self, response_id: str) -> Any:
        return self.record

    async def put(self, response_id: str, chain: dict[str, Any]) -> None:
        pass


@pytest.mark.parametrize(
    "record",
    [
        {"previous_response_id": "resp_x", "items": []},
        b'{"previous_response_id": "resp_x", "input": []}',
        {"previous_response_id": 7, "input": []},
        {"previous_response_id": "resp_x", "input": "text"},
    ],
)
async def test_a_malformed_record_is_logged_and_skipped(record: Any, caplog: pytest.LogCaptureFixture) -> None:
    store = StoringModel(lambda body: response(FOLLOW_UP))
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[], chain_store=OddStore(record)))
    first = await client.responses.create(model="m", input="q")

    follow_up = await client.responses.create(model="m", input="and?", previous_response_id=first.id)

    assert follow_up.output_text == FOLLOW_UP
    assert store.model.requests[-1].body["previous_response_id"] == first.id  # as sent
    assert "is not {previous_response_id: str, input: list, caller: str} for that caller" in caplog.text


class SyncStore:
    def get(self, response_id: str) -> Any:
        return None

    def put(self, response_id: str, chain: dict[str, Any]) -> None:
        pass


@pytest.mark.parametrize("option", [MemoryChainStore, SyncStore()], ids=["a class", "sync get and put"])
def test_a_chain_store_class_or_sync_store_is_refused_at_build(option: Any) -> None:
    with pytest.raises(ConfigurationError, match="chain_store must be a store"):
        AgenticLoopMiddleware(model_for("answer").model, chain_store=option)


@pytest.mark.parametrize("store", [MemoryStore, SyncStore()], ids=["a class", "sync get and put"])
def test_a_key_value_chain_store_on_a_class_or_sync_store_is_refused_at_build(store: Any) -> None:
    with pytest.raises(ConfigurationError, match="KeyValueChainStore needs a KeyValueStore"):
        KeyValueChainStore(store, shared=True)


@pytest.mark.parametrize("how", ["json", "live", "no hooks"])
async def test_a_rewritten_follow_up_shows_the_previous_response_id_the_client_sent(how: str) -> None:
    numbers = itertools.count()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if previous:
            return response(FOLLOW_UP, previous_response_id=previous)
        if next(numbers):
            return response("The value is v.")
        return response(function_call("lookup", {"key": "k"}, "call_s0"))

    store, chains = StoringModel(answer), MemoryChainStore()
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=[ServerTools([lookup])], chain_store=chains))
    first = await first_turn(client, stream=True)  # a live stream's id: the first round's, recorded
    if how == "no hooks":  # the follow-up passes through, rewritten
        client = openai_client(AgenticLoopMiddleware(store.model, hooks=[], chain_store=chains))

    if how == "live":
        async with client.responses.stream(model="m", input="and?", previous_response_id=first.id) as events:
            kinds = {event.type: event async for event in events}
            follow_up = await events.get_final_response()
        assert kinds["response.created"].response.previous_response_id == first.id  # type: ignore[union-attr]
    else:
        follow_up = await client.responses.create(model="m", input="and?", previous_response_id=first.id)

    assert store.model.requests[-1].body["previous_response_id"] == store.answers[1]["id"] != first.id
    assert follow_up.output_text == FOLLOW_UP
    assert follow_up.previous_response_id == first.id
