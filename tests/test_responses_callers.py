"""The chain store follows the app and its callers: a record serves the caller whose turn made it, a DELETE drops it
only once the app deleted what it names, and the ids of a turn's internal responses never reach the client. Judged
by the openai SDK against an app that stores like OpenAI, per API key."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from conftest import openai_client
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from storing import StoringModel, app_of

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.callers import key_hash
from agentic_middleware.testing import function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def storing() -> StoringModel:
    """Each turn one server call, then an answer; a follow-up is answered with the id it chained from, as apps quote
    ids."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if previous:
            return response(f"Chained from {previous}.", previous_response_id=previous)
        if any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in body["input"]):
            return response("The value is v.")
        return response(function_call("lookup", {"key": "k"}, "call_s0"))

    return StoringModel(answer)


def gateway(store: StoringModel, **options: Any) -> tuple[AgenticLoopMiddleware, list[str]]:
    """The middleware with `ServerTools` in front of the storing app (wrapped by `around`, if given)."""
    inner: ASGIApp
    inner, deleted = app_of(store, failing=options.pop("failing", None))
    if (around := options.pop("around", None)) is not None:
        inner = around(inner)
    return AgenticLoopMiddleware(inner, hooks=[ServerTools([lookup])], **options), deleted


async def live_turn(client: openai.AsyncOpenAI) -> Any:
    """A live stream's turn: its id is the first round's, so a record chains its follow-up to the last."""
    async with client.responses.stream(model="m", input="q") as events:
        return await events.get_final_response()


async def test_another_callers_delete_of_an_id_leaves_its_record_and_its_follow_up() -> None:
    store = storing()
    app, deleted = gateway(store)
    a, b = openai_client(app, api_key="key-a"), openai_client(app, api_key="key-b")
    first = await live_turn(a)

    with pytest.raises(openai.NotFoundError):
        await b.responses.delete(first.id)
    follow_up = await a.responses.create(model="m", input="and?", previous_response_id=first.id)

    assert deleted == []
    assert follow_up.output_text == f"Chained from {first.id}."  # the record served A: chained from the turn's last
    assert store.model.requests[-1].body["previous_response_id"] == store.answers[1]["id"]


async def test_another_callers_follow_up_by_an_id_does_not_use_its_record() -> None:
    store = storing()
    app, _ = gateway(store)
    a, b = openai_client(app, api_key="key-a"), openai_client(app, api_key="key-b")
    first = await live_turn(a)

    with pytest.raises(openai.NotFoundError, match=f"Previous response with id '{first.id}' not found"):
        await b.responses.create(model="m", input="and?", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        await b.responses.compact(model="m", previous_response_id=first.id)

    assert [request.body["previous_response_id"] for request in store.model.requests[-2:]] == [first.id] * 2
    assert (await a.responses.create(model="m", input="?", previous_response_id=first.id)).output_text


async def test_a_failed_delete_of_the_chained_response_is_reported_and_the_retry_finishes_it() -> None:
    store = storing()
    failing: set[str] = set()
    app, deleted = gateway(store, failing=failing)
    client = openai_client(app)
    first = await live_turn(client)
    last = store.answers[1]["id"]

    failing.add(last)
    with pytest.raises(openai.InternalServerError) as raised:
        await client.responses.delete(first.id)
    assert raised.value.status_code == 502 and raised.value.code == "chained_delete_failed"
    assert last not in str(raised.value)  # the internal id is not shown
    assert deleted == [first.id] and last in store.stored

    failing.clear()
    await client.responses.delete(first.id)  # the same DELETE again: the SDK retries a 502 by itself

    assert deleted == [first.id, last] and store.stored == {}
    with pytest.raises(openai.NotFoundError, match=first.id):
        await client.responses.create(model="m", input="?", previous_response_id=first.id)


async def test_a_delete_the_app_refuses_keeps_the_record() -> None:
    store = storing()
    failing: set[str] = set()
    app, deleted = gateway(store, failing=failing)
    client = openai_client(app)
    first = await live_turn(client)

    failing.add(first.id)
    with pytest.raises(openai.InternalServerError, match="overloaded") as raised:
        await client.responses.delete(first.id)

    assert raised.value.status_code == 503 and deleted == []  # the app's own answer
    follow_up = await client.responses.create(model="m", input="?", previous_response_id=first.id)
    assert follow_up.output_text == f"Chained from {first.id}."


class Naming:
    """Wraps the app's answers with a header naming the id the request chained from, as some apps do."""

    def __init__(self, app: ASGIApp, store: StoringModel) -> None:
        self.app, self.store = app, store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                previous = str(self.store.model.requests[-1].body.get("previous_response_id")).encode()
                message = {**message, "headers": [*message["headers"], (b"x-chained-from", previous)]}
            await send(message)

        await self.app(scope, receive, named)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_app_error_naming_the_internal_id_shows_the_clients_id(stream: bool) -> None:
    store = storing()
    app, _ = gateway(store, around=lambda inner: Naming(inner, store))
    client = openai_client(app)
    first = await live_turn(client)
    last = store.answers[1]["id"]
    del store.stored[last]  # the app no longer holds the turn's last response (expired, deleted by hand)

    with pytest.raises(openai.NotFoundError, match=f"Previous response with id '{first.id}' not found") as raised:
        if stream:
            async with client.responses.stream(model="m", input="?", previous_response_id=first.id) as events:
                await events.get_final_response()
        else:
            await client.responses.create(model="m", input="?", previous_response_id=first.id)

    assert store.model.requests[-1].body["previous_response_id"] == last  # what the app was sent
    assert last not in raised.value.response.text
    assert raised.value.response.headers["x-chained-from"] == first.id


@pytest.mark.parametrize("how", ["json", "live", "no hooks"])
async def test_the_internal_id_quoted_in_an_answer_shows_as_the_clients_id(how: str) -> None:
    store = storing()
    app, _ = gateway(store)
    first = await live_turn(openai_client(app))
    last = store.answers[1]["id"]
    if how == "no hooks":  # the follow-up passes through, rewritten
        app = AgenticLoopMiddleware(app.app, hooks=[], chain_store=app.chains.store if app.chains else None)
    client = openai_client(app)

    if how == "json" or how == "no hooks":
        raw = await client.responses.with_raw_response.create(model="m", input="?", previous_response_id=first.id)
        follow_up, text = raw.parse(), raw.text
    else:
        async with client.responses.stream(model="m", input="?", previous_response_id=first.id) as events:
            deltas = "".join([event.delta async for event in events if event.type == "response.output_text.delta"])
            follow_up = await events.get_final_response()
        text = deltas
        assert deltas == f"Chained from {first.id}."

    assert store.model.requests[-1].body["previous_response_id"] == last
    assert follow_up.output_text == f"Chained from {first.id}." and follow_up.previous_response_id == first.id
    assert last not in text


class Quoting(StoringModel):
    """Answers each round with a text that quotes the ids of the turn's responses so far, its own included."""

    def __init__(self) -> None:
        self.turn: list[str] = []
        super().__init__(self.quote)

    def quote(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = response(function_call("lookup", {"key": "k"}, "call_s0")) if not self.turn else response("x")
        self.turn.append(answer["id"])
        if len(self.turn) > 1:
            answer["output"][0]["content"][0]["text"] = f"Rounds {' and '.join(self.turn)}."
        return answer


@pytest.mark.parametrize("stream", [False, True])
async def test_a_looped_turn_shows_one_id_wherever_the_app_quotes_its_rounds(stream: bool) -> None:
    store = Quoting()
    hooks = [ServerTools([lookup])]  # without a chain store too: hiding ids does not depend on it
    client = openai_client(AgenticLoopMiddleware(store.model, hooks=hooks, chain_store=False))

    if stream:
        async with client.responses.stream(model="m", input="q") as events:
            kinds = [event async for event in events]
            turn = await events.get_final_response()
        assert kinds[0].response.id == turn.id  # type: ignore[union-attr]
        assert store.turn[1] not in "".join(event.model_dump_json() for event in kinds)  # nor in any delta
    else:
        turn = await client.responses.create(model="m", input="q")

    shown = store.turn[0] if stream else store.turn[1]  # a live stream's id is its first round's
    assert turn.id == shown and turn.output_text == f"Rounds {shown} and {shown}."


class Tenant:
    """An outer middleware that sets `request.state.agentic_caller` from a header, as a gateway's auth does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = dict(scope.get("headers", ())).get(b"x-tenant")
        if tenant is not None:
            scope.setdefault("state", {})["agentic_caller"] = tenant.decode()
        await self.app(scope, receive, send)


async def tenant_of(scope: Scope) -> str | None:
    """A `caller` function, async: the tenant header."""
    tenant = dict(scope.get("headers", ())).get(b"x-tenant")
    return None if tenant is None else tenant.decode()


TENANT_MODULE = """
def tenant(scope):
    return dict(scope["headers"]).get(b"x-tenant", b"").decode() or None
"""


@pytest.mark.parametrize("how", ["state", "async caller", "sync caller", "yaml"])
async def test_the_caller_is_the_gateways_to_say(how: str, tmp_path: Path) -> None:
    store = storing()
    options: dict[str, Any] = {}
    if how == "async caller":
        options["caller"] = tenant_of
    elif how == "sync caller":
        options["caller"] = lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode() or None
    elif how == "yaml":  # by dotted path, as every callable option
        (tmp_path / "tenants.py").write_text(TENANT_MODULE)
        (tmp_path / "config.yaml").write_text("agentic_middleware:\n  caller: tenants.tenant\n")
        options["config"] = tmp_path / "config.yaml"
    app, _ = gateway(store, **options)
    client = openai_client(Tenant(app) if how == "state" else app)  # one API key for both tenants
    first = await live_turn(client.with_options(default_headers={"x-tenant": "t1"}))

    with pytest.raises(openai.BadRequestError, match="No tool output found"):  # t2 finds no record: sent as is
        await client.with_options(default_headers={"x-tenant": "t2"}).responses.create(
            model="m", input="?", previous_response_id=first.id
        )
    follow_up = await client.with_options(default_headers={"x-tenant": "t1"}).responses.create(
        model="m", input="?", previous_response_id=first.id
    )
    assert follow_up.output_text == f"Chained from {first.id}."


async def test_requests_that_name_no_one_share_only_records_made_by_such_requests() -> None:
    store = storing()
    app, _ = gateway(store, caller=tenant_of)
    client = openai_client(app)  # one API key: the app lets everyone chain; only the caller differs
    anonymous = await live_turn(client)
    named = await live_turn(client.with_options(default_headers={"x-tenant": "t1"}))

    assert (await client.responses.create(model="m", input="?", previous_response_id=anonymous.id)).output_text
    with pytest.raises(openai.BadRequestError, match="No tool output found"):
        await client.responses.create(model="m", input="?", previous_response_id=named.id)


class UserIds:
    """An outer middleware whose auth sets `request.state.agentic_caller` to its user id object, not a string."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = dict(scope.get("headers", ())).get(b"x-user")
        if user is not None:
            scope.setdefault("state", {})["agentic_caller"] = uuid.uuid5(uuid.NAMESPACE_OID, user.decode())
        await self.app(scope, receive, send)


async def test_a_caller_the_gateway_set_that_is_not_a_string_keeps_records_of_no_one() -> None:
    store = storing()
    app, _ = gateway(store)
    client = openai_client(UserIds(app))  # one API key for every user: only the gateway's auth tells them apart
    first = await live_turn(client.with_options(default_headers={"x-user": "a"}))

    with pytest.raises(openai.BadRequestError, match="No tool output found"):  # no record used, none made
        await client.with_options(default_headers={"x-user": "b"}).responses.create(
            model="m", input="?", previous_response_id=first.id
        )
    with pytest.raises(openai.InternalServerError) as raised:
        await client.with_options(default_headers={"x-user": "b"}).responses.delete(first.id)
    assert raised.value.status_code == 503 and raised.value.code == "chains_unavailable"


def failing_caller(scope: Scope) -> str | None:
    raise RuntimeError("auth service down")


async def test_a_caller_function_that_fails_leaves_no_record_in_use_and_refuses_a_delete() -> None:
    store = storing()
    app, deleted = gateway(store)
    client = openai_client(app)
    first = await live_turn(client)
    broken, _ = gateway(store, caller=failing_caller, chain_store=app.chains.store if app.chains else None)
    client = openai_client(broken)

    with pytest.raises(openai.BadRequestError, match="No tool output found"):  # sent as is: no record used
        await client.responses.create(model="m", input="?", previous_response_id=first.id)
    with pytest.raises(openai.InternalServerError) as raised:
        await client.with_options(max_retries=0).responses.delete(first.id)

    assert raised.value.status_code == 503 and raised.value.code == "chains_unavailable"
    assert deleted == []  # the app was not asked: whether the id hides a response was unknown


def test_the_default_caller_is_litellms_hash_of_the_key() -> None:
    from litellm.proxy._types import hash_token

    headers = {
        "authorization": [(b"authorization", b"Bearer sk-1")],
        "basic": [(b"authorization", b"Basic sk-1")],  # LiteLLM drops that scheme too
        "x-api-key": [(b"x-api-key", b"sk-1")],
        "azure": [(b"api-key", b"sk-1")],
        "google": [(b"x-goog-api-key", b"sk-1")],
        "apim": [(b"ocp-apim-subscription-key", b"sk-1")],
        "litellm's own first": [(b"authorization", b"Bearer upstream"), (b"x-litellm-api-key", b"Bearer sk-1")],
        "an empty bearer, then a key": [(b"authorization", b"Bearer "), (b"x-api-key", b"sk-1")],
        "repeated: the first, as Starlette reads it": [(b"x-api-key", b"sk-1"), (b"x-api-key", b"sk-2")],
    }
    for sent in headers.values():
        assert key_hash({"type": "http", "headers": sent}) == hash_token("sk-1") == hashlib.sha256(b"sk-1").hexdigest()
    assert key_hash({"type": "http", "headers": [], "state": {"user_api_key_hash": "h"}}) == "h"
    assert key_hash({"type": "http", "headers": []}) is None
    assert key_hash({"type": "http", "headers": [(b"authorization", b"Bearer")]}) is None


def azure_client(app: ASGIApp, key: str) -> openai.AsyncAzureOpenAI:
    """The SDK's Azure client, which sends its key in `api-key` (no `authorization`)."""
    return openai.AsyncAzureOpenAI(
        api_key=key,
        api_version="2025-04-01-preview",
        base_url="http://gateway/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    )


async def test_callers_known_by_the_azure_key_header_keep_their_records_apart() -> None:
    store = storing()  # keys responses by `authorization`: to this app every Azure caller is the same
    app, deleted = gateway(store)
    a, b = azure_client(app, "key-a"), azure_client(app, "key-b")
    first = await live_turn(a)

    with pytest.raises(openai.BadRequestError, match="No tool output found"):  # B finds no record: sent as is
        await b.responses.create(model="m", input="?", previous_response_id=first.id)
    await b.responses.delete(first.id)  # the app lets B delete it; A's record is not B's to use
    assert deleted == [first.id]
    assert store.model.requests[-1].body["previous_response_id"] == first.id
