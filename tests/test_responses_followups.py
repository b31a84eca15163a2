"""Requests beside `/v1/responses` that name a recorded id (a live stream's, `closing="text"`): `compact` and
`input_tokens` chain as a follow-up does, and `DELETE` reaches the turn's last response too."""

from __future__ import annotations

import itertools
from typing import Any

import openai
import orjson
import pytest
from conftest import openai_client
from storing import StoringModel, app_of

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def storing() -> StoringModel:
    """One server call, then an answer; the app keeps each response with its context."""
    numbers = itertools.count()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("previous_response_id") or next(numbers):
            return response("The value is v.")
        return response(function_call("lookup", {"key": "k"}, "call_s0"))

    return StoringModel(answer)


async def live_turn(client: openai.AsyncOpenAI) -> Any:
    async with client.responses.stream(model="m", input="q") as events:
        return await events.get_final_response()


@pytest.mark.parametrize("endpoint", ["compact", "input_tokens"])
async def test_compact_and_input_tokens_chain_from_the_turns_last_response(endpoint: str) -> None:
    store = storing()
    inner, _ = app_of(store)
    client = openai_client(AgenticLoopMiddleware(inner, hooks=[ServerTools([lookup])]))

    first = await live_turn(client)
    if endpoint == "compact":
        await client.responses.compact(model="m", previous_response_id=first.id)
    else:
        await client.responses.input_tokens.count(model="m", previous_response_id=first.id)

    sent = store.model.requests[-1]
    assert sent.path == f"/v1/responses/{endpoint}"
    assert sent.body["previous_response_id"] == store.answers[1]["id"] != first.id
    assert first.id == store.answers[0]["id"]


async def test_compact_under_litellms_paths_chains_too() -> None:
    store = storing()
    inner, _ = app_of(store, prefix="")
    client = openai_client(AgenticLoopMiddleware(inner, hooks=[ServerTools([lookup])], routes="litellm"))
    client = client.with_options(base_url="http://gateway")

    first = await live_turn(client)
    await client.responses.compact(model="m", previous_response_id=first.id)

    assert store.model.requests[-1].body["previous_response_id"] == store.answers[1]["id"]


async def test_deleting_a_recorded_id_deletes_the_turns_last_response_and_forgets_the_record() -> None:
    store = storing()
    inner, deleted = app_of(store)
    client = openai_client(AgenticLoopMiddleware(inner, hooks=[ServerTools([lookup])]))

    first = await live_turn(client)
    await client.responses.delete(first.id)

    assert deleted == [first.id, store.answers[1]["id"]]  # the id, then the turn's last response (the whole turn)
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="m", input="and?", previous_response_id=first.id)


async def test_a_compact_request_over_max_body_bytes_is_passed_on_as_sent() -> None:
    store = storing()
    inner, _ = app_of(store)
    middleware = AgenticLoopMiddleware(inner, hooks=[ServerTools([lookup])], max_body_bytes=20_000)
    first = await live_turn(openai_client(middleware))

    # In one piece, as a server may deliver it: only its size tells that it is over the limit.
    body = orjson.dumps({"model": "m", "previous_response_id": first.id, "input": "x" * 30_000})
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/responses/compact",
        "raw_path": b"/v1/responses/compact",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Bearer test-key"),  # the first turn's caller
        ],
        "state": {},
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await middleware(scope, receive, send)

    assert store.model.requests[-1].body["previous_response_id"] == first.id  # not the recorded chain
    assert statuses == [400]  # the stored first round still holds the server's call
