"""Internal response ids are hidden wherever the app writes them: after an escape or an encoded quote, cut across
the chunks of any answer, in answers too large to hold, and in answers the app would have compressed. Judged by the
openai SDK against the app that stores like OpenAI (storing.py), with its follow-up's answer scripted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import openai
import orjson
import pytest
from conftest import openai_client
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from streams import event_stream
from test_responses_callers import Quoting, gateway, live_turn, lookup, storing

from agentic_middleware import AgenticLoopMiddleware, sse
from agentic_middleware.surfaces.responses_lane import TextLane
from agentic_middleware.testing import ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools

Answer = Callable[[str], Response]


class FollowUps:
    """Answers every request that chains from an id with `answer(the id it was sent)`; the rest go to the app."""

    def __init__(self, app: ASGIApp, answer: Answer) -> None:
        self.app, self.answer = app, answer
        self.sent: list[tuple[str, dict[str, str]]] = []  # each follow-up's previous_response_id and headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        previous = orjson.loads(body).get("previous_response_id")
        if previous is None:
            replayed = False

            async def again() -> Message:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.app(scope, again, send)
            return
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        self.sent.append((previous, headers))
        await self.answer(previous)(scope, receive, send)


class Chained(NamedTuple):
    gateway: AgenticLoopMiddleware
    client: openai.AsyncOpenAI
    shown: str  # the id the client got
    internal: str  # the recorded id its follow-ups chain from
    app: FollowUps


async def chained(answer: Answer, **options: Any) -> Chained:
    """A gateway whose first (live) turn left a record; its follow-ups are answered by `answer`."""
    store = storing()
    around: list[FollowUps] = []
    app, _ = gateway(store, around=lambda inner: around.append(FollowUps(inner, answer)) or around[0], **options)
    client = openai_client(app)
    first = await live_turn(client)
    return Chained(app, client, first.id, store.answers[1]["id"], around[0])


def error(text: str, **headers: str) -> Answer:
    return lambda internal: Response(
        text.replace("ID", internal).encode(),
        404,
        media_type="application/json",
        headers={name: value.replace("ID", internal) for name, value in headers.items()},
    )


@pytest.mark.parametrize(
    "written",
    [
        '{"error": {"message": "not found:\\nID"}}',  # a JSON escape before it
        '{"error": {"message": "no response \\u003cID\\u003e"}}',  # Go's encoding/json writes < as \u003c
        '{"error": {"message": "see /v1/responses?after=%22ID%22"}}',  # a percent-encoded quote
    ],
)
async def test_an_internal_id_after_an_escape_or_an_encoded_quote_is_hidden(written: str) -> None:
    _, client, shown, internal, app = await chained(error(written, link="</v1/responses?id=%22ID%22>"))

    with pytest.raises(openai.NotFoundError) as raised:
        await client.responses.create(model="m", input="?", previous_response_id=shown)

    assert app.sent[-1][0] == internal  # what the app was sent
    assert internal not in raised.value.response.text and shown in raised.value.response.text
    assert raised.value.response.headers["link"] == f"</v1/responses?id=%22{shown}%22>"


def chunked(text: str, media_type: str | None, size: int) -> Answer:
    """The answer in chunks of `size` bytes, so that ids are cut across two, as a proxy relaying raw chunks sends
    it (`StreamingResponse(upstream.aiter_raw())`, often without a content-type)."""

    def answer(internal: str) -> Response:
        body = text.replace("ID", internal).encode()

        async def pieces() -> AsyncIterator[bytes]:
            for at in range(0, len(body), size):
                yield body[at : at + size]

        return StreamingResponse(pieces(), 404, media_type=media_type, headers={"content-length": str(len(body))})

    return answer


TEXT = '{"error": {"message": "No response ID here; IDX is another id."}, "id": "ID"}'


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("media_type", [None, "text/plain", "application/json"])
async def test_an_internal_id_cut_across_chunks_of_any_answer_is_hidden(media_type: str | None, size: int) -> None:
    _, client, shown, internal, _ = await chained(chunked(TEXT, media_type, size))

    with pytest.raises(openai.NotFoundError) as raised:
        await client.responses.create(model="m", input="?", previous_response_id=shown)

    expected = TEXT.replace("IDX", f"{internal}X").replace("ID", shown)  # a longer id is another id: kept
    assert raised.value.response.text == expected


async def test_an_answer_over_max_body_bytes_is_searched_as_it_goes_not_held_whole() -> None:
    seen: list[int] = []  # how many messages the client had when the app sent each chunk
    got: list[Message] = []

    def answer(internal: str) -> Response:
        async def pieces() -> AsyncIterator[bytes]:
            yield b'{"error": {"message": "' + internal.encode() + b'", "padding": "'
            for _ in range(8):
                seen.append(len(got))
                yield b"x" * 4096
            seen.append(len(got))
            yield b'", "again": "' + internal.encode() + b'"}}'

        return StreamingResponse(pieces(), 404, media_type="application/json")

    gateway_app, _, shown, internal, _ = await chained(answer, max_body_bytes=16384)

    async def collect(message: Message) -> None:
        got.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer test-key"), (b"content-type", b"application/json")],
        "server": ("gateway", 80),
        "client": ("127.0.0.1", 1),
    }
    body = orjson.dumps({"model": "m", "input": "?", "previous_response_id": shown})
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    await gateway_app(scope, receive, collect)

    assert seen[-1] > 1  # the start and the first chunks had gone out before the app's last chunk
    start = got[0]
    assert b"content-length" not in dict(start["headers"])  # a replacement may change the length
    text = b"".join(message.get("body", b"") for message in got[1:]).decode()
    assert internal not in text and text.count(shown) == 2
    assert orjson.loads(text)["error"]["again"] == shown


@pytest.mark.parametrize("how", ["no hooks", "looped", "compact"])
async def test_a_rewritten_follow_up_asks_the_app_for_an_uncompressed_answer(how: str) -> None:
    middleware, client, shown, internal, app = await chained(
        lambda internal: JSONResponse({"error": {"message": internal}}, 404)
    )
    if how == "no hooks":  # the follow-up passes through, rewritten
        assert middleware.chains is not None
        client = openai_client(AgenticLoopMiddleware(middleware.app, hooks=[], chain_store=middleware.chains.store))

    with pytest.raises(openai.NotFoundError):
        if how == "compact":
            await client.responses.compact(model="m", previous_response_id=shown)
        else:
            await client.responses.create(model="m", input="?", previous_response_id=shown)

    previous, headers = app.sent[-1]
    assert previous == internal
    assert "accept-encoding" not in headers  # the SDK asks for gzip; the answer is searched for the internal id


class Slow(Quoting):
    """`Quoting`, each round answered after a pause longer than the keep-alive interval, so that a buffered stream
    has begun (with a keep-alive) before any round has answered."""

    async def slow(self, request: Any) -> Any:
        await asyncio.sleep(0.05)
        return self.reply(request)

    def __init__(self) -> None:
        super().__init__()
        self.model.default = self.slow


async def test_a_buffered_stream_begun_before_its_rounds_answered_shows_one_id() -> None:
    store = Slow()
    app = AgenticLoopMiddleware(
        store.model, hooks=[ServerTools([lookup])], chain_store=False, streaming="buffered", stream_keepalive=0.01
    )
    raw = await openai_client(app).responses.with_raw_response.create(model="m", input="q", stream=True)
    text = (await raw.http_response.aread()).decode()

    assert ": keep-alive" in text  # the stream began before the first round answered
    assert store.turn[0] not in text and text.count(store.turn[1]) > 1


FIRST, LATER = "resp1first", "resp2later"  # letters and digits only, as OpenAI's padding is: it may spell one
QUOTED = "x" * 9 + " ID " + "y" * 9  # in deltas as long as the id: "xxxxxxxxx ", the id, " yyyyyyyyy"
_TEXT_DELTA = b"event: response.output_text.delta\n"


def quoting_round(where: str) -> list[bytes]:
    """A later round's events, each in a chunk of its own (its text deltas take the relay's lane), naming the
    round's own id, which the client must not see: in a delta's text, in each delta's `obfuscation` padding, or in
    the message's item id (which every delta of the part carries)."""
    text = QUOTED.replace("ID", LATER) if where == "text" else "x" * 30  # the id whole in a delta of its own
    item_id = f"msg_{LATER}" if where == "item id" else "msg_2"
    part = {"type": "output_text", "text": text, "annotations": []}
    message = {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": [part]}
    events = list(sse.responses_events({**response(message), "id": LATER}, chunk_size=len(LATER)))
    if where == "padding":
        for n, event in enumerate(events):
            if event.startswith(_TEXT_DELTA):
                payload = orjson.loads(event[len(_TEXT_DELTA) + len(b"data: ") : -2])
                events[n] = sse.named_event("response.output_text.delta", {**payload, "obfuscation": LATER})
    return events


@pytest.mark.parametrize("where", ["text", "padding", "item id"])
async def test_a_later_rounds_text_deltas_passed_on_by_the_lane_never_show_its_id(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text deltas of a live stream's later round go out by the relay's lane, searched for the hidden ids from
    their string on (shown.py, `_lane_needles`): the round's id is shown as the turn's wherever a delta holds it."""
    first = list(sse.responses_events({**response(function_call("lookup", {"key": "k"}, "call_1")), "id": FIRST}))
    app = ScriptedModel(event_stream(first), event_stream(quoting_round(where)))
    passed, text = await lane_stream(app, monkeypatch)

    assert len(passed) == 3  # the later round's three deltas took the lane
    assert LATER.encode() not in text
    events = [orjson.loads(line[len(b"data: ") :]) for line in text.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1]["response"]["id"] == FIRST
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    told = "".join(delta["delta"] for delta in deltas)
    assert told == (QUOTED.replace("ID", FIRST) if where == "text" else "x" * 30)
    assert {delta["item_id"] for delta in deltas} == {f"msg_{FIRST}" if where == "item id" else "msg_2"}
    assert all(delta.get("obfuscation", FIRST) == FIRST for delta in deltas)


ESCAPED = LATER.replace("l", "\\u006c").encode()  # `resp2\u006cater`: the same string to a JSON reader


async def test_a_later_rounds_id_spelled_with_an_escape_never_shows() -> None:
    """A later round's id spelled with a JSON escape in its events, which a byte search misses: such bytes are written
    anew, by the lane's text deltas too (orjson spells the id plainly), so the id is found and shown as the turn's."""
    first = list(sse.responses_events({**response(function_call("lookup", {"key": "k"}, "call_1")), "id": FIRST}))
    later = [event.replace(LATER.encode(), ESCAPED) for event in quoting_round("text")]
    assert sum(ESCAPED in event for event in later) > 3  # deltas, a part's and an item's text, the lifecycle
    app = ScriptedModel(event_stream(first), event_stream(later))
    gateway = AgenticLoopMiddleware(app, hooks=[ServerTools([lookup])], chain_store=False)
    raw = await openai_client(gateway).responses.with_raw_response.create(model="m", input="q", stream=True)
    text = await raw.http_response.aread()

    events = [orjson.loads(line[len(b"data: ") :]) for line in text.split(b"\n") if line.startswith(b"data: ")]
    assert LATER not in orjson.dumps(events).decode()  # as read: escapes undone
    assert events[-1]["response"]["id"] == FIRST
    told = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert told == QUOTED.replace("ID", FIRST)


ONE, TWO, THREE = "resp_1st00", "resp_2nd00", "resp_3rd00"  # one length, one common start: one needle for the lane


def texts_round(response_id: str, pieces: list[str], *calls: dict[str, Any]) -> list[bytes]:
    """A round's events, each in a chunk of its own: a message whose text deltas are `pieces`, one each (all as long
    as the ids), then `calls`."""
    text = "".join(pieces)
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"type": "message", "id": f"msg_{response_id[5:8]}", "role": "assistant", "status": "completed"}
    body = {**response({**item, "content": [part]}, *calls), "id": response_id}
    return list(sse.responses_events(body, chunk_size=len(ONE)))


async def test_each_round_named_mid_stream_is_hidden_in_the_lanes_deltas_from_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three live rounds, the first two calling a server tool: each later round's id is known only when its own
    `response.created` comes, mid-stream, and must be hidden from then on in the text deltas the relay's lane passes
    on (the relay names the round to the id-hiding `send` as it starts, shown.py): the second round's deltas quote
    its own id, the third's quote the second's and its own, with a second id hidden since the last lane."""
    rounds = [
        texts_round(ONE, ["looking up"], function_call("lookup", {"key": "a"}, "call_1")),
        texts_round(TWO, ["round two ", TWO, " thinking"], function_call("lookup", {"key": "b"}, "call_2")),
        texts_round(THREE, ["after the ", TWO, " round is ", THREE, " done, yes"]),
    ]
    app = ScriptedModel(*(event_stream(events) for events in rounds))
    passed, text = await lane_stream(app, monkeypatch)

    assert len(passed) == 9  # every text delta took the lane, the first round's included
    assert TWO.encode() not in text and THREE.encode() not in text
    events = [orjson.loads(line[len(b"data: ") :]) for line in text.split(b"\n") if line.startswith(b"data: ")]
    assert events[0]["response"]["id"] == events[-1]["response"]["id"] == ONE
    told = [event["delta"] for event in events if event["type"] == "response.output_text.delta"]
    assert told == ["looking up", "round two ", ONE, " thinking", "after the ", ONE, " round is ", ONE, " done, yes"]


async def lane_stream(app: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], bytes]:
    """The deltas the Responses text lane passed on by their bytes (other events are taken whole, parsed), and the
    stream the client read, for a streamed `/v1/responses` turn on `app` behind `ServerTools`."""
    passed: list[bytes] = []
    pass_on = TextLane.pass_on

    def noted(relay: TextLane, chunk: bytes) -> bytes | None:
        out = pass_on(relay, chunk)
        if out is not None and out is relay.passed:
            passed.append(out)
        return out

    monkeypatch.setattr(TextLane, "pass_on", noted)
    gateway = AgenticLoopMiddleware(app, hooks=[ServerTools([lookup])], chain_store=False)
    raw = await openai_client(gateway).responses.with_raw_response.create(model="m", input="q", stream=True)
    return passed, await raw.http_response.aread()
