"""The Responses relay's lane (`ResponsesRelay.pass_on`): a text delta in a chunk of its own, in the API's own shape,
is renumbered in bytes without the SSE reader; the client and the hooks get what reading each event gives."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from conftest import http_client, openai_client
from hypothesis import given
from hypothesis import strategies as st
from litellm.integrations.custom_logger import CustomLogger
from streams import event_stream
from test_relays import fed_round, noted_lookup, passed_round, rounds_settings, same_json
from test_responses_relay import RESPONSES, responses_round

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.sse_reader import SSEReader
from agentic_middleware.surfaces.responses_relay import ResponsesRelay
from agentic_middleware.testing import ScriptedModel, function_call, response

_DELTA = b"event: response.output_text.delta\n"


def reshaped(event: bytes, shape: str) -> bytes:
    """A text delta as other servers write it: with OpenAI's `obfuscation` padding, or without `logprobs`."""
    if not event.startswith(_DELTA) or shape == "plain":
        return event
    payload = orjson.loads(event[len(_DELTA) + 6 : -2])
    if shape == "padded":
        payload["obfuscation"] = "aZ09x"
    else:
        del payload["logprobs"]
    return sse.named_event("response.output_text.delta", payload)


def lane_takes(text: str) -> bool:
    """Whether a delta of this text is spelled so that the lane may take it: no quote within (an escaped backslash
    last, `"\\\\"`, ends before its closing quote, which is the first quote: JSON, taken), and no `\\u00` escape
    (a control character's, as orjson spells one: such an escape could spell an id's ASCII, so it is read)."""
    spelled = orjson.dumps(text)[1:-1]
    return b'"' not in spelled and b"\\u00" not in spelled


@rounds_settings
@given(
    data=st.data(),
    count=st.integers(1, 3),
    chunk_size=st.integers(1, 12),
    shape=st.sampled_from(["plain", "padded", "bare"]),
)
def test_responses_deltas_passed_on_in_bytes_give_the_client_and_the_hooks_what_reading_each_gives(
    data: st.DataObject, count: int, chunk_size: int, shape: str
) -> None:
    """A stream that writes each event in a chunk of its own takes the lane for its open part's text deltas: the client
    gets the same bytes (renumbered, output_index moved in later rounds) and the hooks the same answer as when every
    event is read and fed, whatever the text (quotes, backslashes, control characters, any character)."""
    passed, fed = RESPONSES.relay(None), RESPONSES.relay(None)
    assert isinstance(passed, ResponsesRelay) and fed is not None
    for number in range(count):
        body = data.draw(responses_round(final=number == count - 1))
        events = [reshaped(event, shape) for event in sse.responses_events(body, chunk_size=chunk_size)]
        # Deltas the lane passed on by their bytes, unparsed: what went out is then what it notes as `passed`.
        got, taken = passed_round(passed, events, lambda out: out is passed.passed)
        cuts = data.draw(st.lists(st.integers(0, 10**6), max_size=20))
        assert b"".join(got) == b"".join(fed_round(fed, b"".join(events), cuts))
        assert same_json(passed.body()) == same_json(fed.body()) == same_json(body)
        # Every delta of a message sent before the round's first call, spelled so that it may, took the lane by its
        # bytes (the other events, and the deltas it does not take so, are taken whole, parsed, and written anew).
        first_call = next((i for i, item in enumerate(body["output"]) if item["type"] == "function_call"), 10**9)
        deltas = [orjson.loads(event[len(_DELTA) + 6 : -2]) for event in events if event.startswith(_DELTA)]
        assert taken == sum(1 for d in deltas if d["output_index"] < first_call and lane_takes(d["delta"]))
    final = same_json(body)
    assert passed.finish(final) == fed.finish(final)


def delta(text: bytes, number: int, index: int = 0, part: int = 0, item: bytes = b"msg_2") -> bytes:
    """A text delta of the second round's message (`msg_2`) in the lane's shape, its string as spelled here."""
    return (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":%d,'
        b'"item_id":"%s","output_index":%d,"content_index":%d,"delta":"%s","logprobs":[]}\n\n'
        % (number, item, index, part, text)
    )


CALL = {**function_call("lookup", {"key": "smuggled"}), "status": "in_progress", "arguments": ""}

# Deltas at the place of the answer's first one (its sequence_number 4): each is given to a round whose events come
# one per chunk (the lane's) and to the same round in one chunk (the reader's), which must agree.
ODD = {
    "an escaped quote": [delta(b'say \\"hi\\"', 4)],
    "an escaped backslash last": [delta(b"a\\\\", 4)],
    "an escaped quote before an end's spelling": [delta(b"abc\\", 4)],  # `"abc\","logprobs":[]}`: not JSON
    "escapes spelled otherwise": [delta(b"\\u00e9\\/\\ud83d\\ude00", 4)],  # the lane's: the client reads the same
    "half a surrogate pair": [delta(b"\\ud83d", 4)],
    "an escape JSON does not have": [delta(b"a\\x", 4)],
    "bytes that are not UTF-8": [delta(b"\xff\xfe", 4)],
    "a character cut between two deltas": [delta(b"\xe2\x82", 4), delta(b"\xac", 5)],
    "a raw control character": [delta(b"a\tb", 4)],
    "CRLF line endings": [delta(b"crlf", 4).replace(b"\n", b"\r\n")],
    "no event line": [delta(b"data only", 4).split(b"\n", 1)[1]],
    "its string given twice": [delta(b"shown", 4).replace(b'"logprobs":[]', b'"logprobs":[],"delta":"other"')],
    "its item named twice": [delta(b"x", 4).replace(b'"item_id"', b'"item_id":"msg_9","item_id"')],
    "its type given again": [delta(b"x", 4).replace(b"[]}", b'[],"type":"response.output_text.done"}')],
    "another part": [delta(b"elsewhere", 4, part=1)],
    "another item": [delta(b"elsewhere", 4, item=b"msg_9")],
    "an output_index the app never added": [delta(b"nowhere", 4, index=3)],
    "a number out of order": [delta(b"late", 99)],
    "padding that is not letters and digits": [delta(b"x", 4).replace(b"[]}", b'[],"obfuscation":"a-b"}')],
    "a field of its own": [delta(b"x", 4).replace(b"[]}", b'[],"extra":1}')],
    "padding that is not UTF-8": [delta(b"x", 4).replace(b"[]}", b'[],"obfuscation":"\xff"}')],
    "padding that names its type again": [
        delta(b"x", 4).replace(b"[]}", b'[],"obfuscation":"a","type":"response.output_text.done"}')
    ],
    "another event's name": [delta(b"x", 4).replace(b"text.delta\n", b"text.DELTA\n")],
    "two deltas in one chunk": [delta(b"x", 4) + delta(b"y", 5)],
    "a call in the delta's chunk": [
        delta(b"x", 4)
        + sse.named_event(
            "response.output_item.added",
            {"type": "response.output_item.added", "sequence_number": 5, "output_index": 1, "item": CALL},
        )
    ],
}


UNREADABLE = {  # as the reader reads them: the round fails with the route's error, its tool call never run
    "an escaped quote before an end's spelling",
    "half a surrogate pair",
    "an escape JSON does not have",
    "bytes that are not UTF-8",
    "padding that is not UTF-8",
    "a character cut between two deltas",
    "a raw control character",
    "an output_index the app never added",
    "another part",  # none was added: the openai SDK's accumulator raises an IndexError
}


def _sdk_text(chunks: list[bytes]) -> str | None:
    """The text the openai SDK adds to the first message's first part of these events (it reads each with `json`),
    or None where one cannot be read."""
    text = ""
    for chunk in chunks:
        for event in chunk.replace(b"\r\n", b"\n").split(b"\n\n"):
            data = next((line[6:] for line in event.split(b"\n") if line.startswith(b"data: ")), None)
            if data is None:
                continue
            try:
                payload = json.loads(data)
            except ValueError:
                return None
            if payload.get("type") == "response.output_text.delta" and payload["output_index"] == 0:
                text += payload["delta"]
    return text


def _spelled(text: str) -> bytes | None:
    try:
        return orjson.dumps(text)
    except orjson.JSONEncodeError:  # half a surrogate pair: the round cannot be read anyway
        return None


@pytest.mark.parametrize("odd", list(ODD))
@pytest.mark.parametrize("at", ["first round", "later round"])
async def test_an_odd_delta_reaches_the_client_and_the_hooks_as_the_reader_reads_it(odd: str, at: str) -> None:
    """Whatever a delta holds, the lane takes it as the reader does or leaves it to the reader: the client's events,
    the openai SDK's final response, the failure of a round that cannot be read and the tool calls run are the same
    when the round's events come one per chunk (the lane) and all in one chunk (the reader)."""

    answer = response({**response("plain text")["output"][0], "id": "msg_2"})
    if at == "later round":
        rounds = [response("Let me check.", function_call("lookup", {"key": "k"})), answer]
    else:  # the odd delta in the round of the call, before it
        rounds = [response({**answer["output"][0]}, function_call("lookup", {"key": "k"})), response("done")]
    streams = [list(sse.responses_events(body)) for body in rounds]
    odd_round = streams[-1] if at == "later round" else streams[0]
    assert odd_round[4].startswith(_DELTA)
    odd_round[4:4] = ODD[odd]
    # The text the client's SDK adds of the odd deltas, told in the item's ends too (its `.done` events and the
    # terminal's output), as a server that sends them would: else the round fails for the text alone.
    shown = _sdk_text(ODD[odd])
    told = _spelled(shown + "plain text") if shown is not None else None
    if told is not None:
        odd_round[:] = [e if e.startswith(_DELTA) else e.replace(b'"plain text"', told) for e in odd_round]

    async def run(merged: bool) -> tuple[list[tuple[str, Any]], Any, list[str], int]:
        noted, ran = noted_lookup()
        model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
        app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])
        async with http_client(app) as client:
            raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        events = [(event.event, orjson.loads(event.data)) for event in SSEReader().feed(raw.content)]
        model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
        sdk = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])]))
        try:
            async with sdk.responses.stream(model="m", input="hi") as stream:
                final: Any = (await stream.get_final_response()).model_dump()
        except Exception as error:  # what the SDK raises: the same in both
            final = type(error).__name__
        return events, final, ran, raw.status_code

    passed, read = await run(merged=False), await run(merged=True)
    assert passed == read
    events, _, ran, _ = passed
    assert (events[-1][1]["type"] == "error") == (odd in UNREADABLE)
    if at == "first round":  # a round that cannot be read has no tool call run
        assert (ran == []) == (odd in UNREADABLE)


def test_a_plain_delta_taken_by_the_lane_is_renumbered_in_later_rounds() -> None:
    """The lane is taken (a relay that never took it would pass the tests above too): in the first round a delta
    goes out as the app's bytes, in a later one with the client's sequence_number and output_index."""
    relay = RESPONSES.relay(None)
    assert relay is not None
    first = list(sse.responses_events(response("Let me check.", function_call("lookup", {"key": "k"}))))
    relay.begin_round()
    reader = SSEReader()
    for event in first:
        out = relay.pass_on(event) if reader.between_events else None
        if event.startswith(_DELTA):
            assert out is event  # as it came: the app's number is the client's
        elif out is None:
            [relay.feed(read) for read in reader.feed(event)]
    relay.begin_round()
    second = list(sse.responses_events(response({**response("x")["output"][0], "id": "msg_2"})))
    for event in second[:4]:  # response.created ... content_part.added
        [relay.feed(read) for read in reader.feed(event)]
    out = relay.pass_on(delta(b"tok", 4))
    assert out is not None
    expected = orjson.loads(delta(b"tok", 4)[len(_DELTA) + 6 : -2])
    got = orjson.loads(out[len(_DELTA) + 6 : -2])
    assert list(got) == list(expected)  # the same keys in the same order
    assert got == {**expected, "sequence_number": got["sequence_number"], "output_index": 1}
    assert got["sequence_number"] == relay.emit.next - 1 > 4


async def test_a_delta_of_the_message_after_a_call_began_is_held_as_the_reader_holds_it() -> None:
    """The lane closes at any event but a delta: a delta of the message's part that comes after a call's item began
    (the message still open, its ends after it) is held with the call (and dropped with it when the call is
    claimed), never passed on at once."""
    first = list(sse.responses_events(response({**response("x")["output"][0], "id": "msg_2"}, CALL_ITEM)))
    at = next(n for n, event in enumerate(first) if b'"type":"function_call"' in event) + 1
    ends = [e for e in first[:at] if e.split(b"\n", 1)[0].endswith((b"text.done", b"part.done", b"item.done"))]
    first = [e for e in first if e not in ends]
    at -= len(ends)
    first[at:at] = [delta(b"late", 0), *ends]  # the message's ends after the late delta
    # telling its text with it, as a server that sends it so would
    first = [e if e.startswith(_DELTA) else e.replace(b'"text":"x"', b'"text":"xlate"') for e in first]
    streams = [first, list(sse.responses_events(response("done")))]
    got = []
    for merged in (False, True):
        model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
        noted, ran = noted_lookup()
        async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])) as client:
            raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        got.append(raw.content)
        assert ran == ["k"]
    assert got[0] == got[1] and b'"delta":"late"' not in got[0]  # held with the claimed call, and dropped with it


CALL_ITEM = function_call("lookup", {"key": "k"})


class JudgedAnswers(CustomLogger):
    """A gate that claims nothing and notes each answer it is asked about: what the hooks judge."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def async_should_run_agentic_loop(
        self, response: Any, *args: Any, **kwargs: Any
    ) -> tuple[bool, dict[str, Any]]:
        self.answers.append(orjson.loads(orjson.dumps(response, default=dict)))
        return False, {}


SHOWN_CALL = function_call("shell", {"cmd": "rm -rf ~"})
SHOWN_TEXT = {**response("the text the client records")["output"][0], "id": "msg_shown"}
# What the terminal event says instead of the item its `output_item.done` gave the client.
RETOLD = {
    "a call's arguments": ([SHOWN_TEXT, SHOWN_CALL], [SHOWN_TEXT, {**SHOWN_CALL, "arguments": '{"cmd":"ls"}'}]),
    "a call's name": ([SHOWN_TEXT, SHOWN_CALL], [SHOWN_TEXT, {**SHOWN_CALL, "name": "lookup"}]),
    "a message's text": (
        [SHOWN_TEXT],
        [{**SHOWN_TEXT, "content": [{"type": "output_text", "text": "other text", "annotations": []}]}],
    ),
    "an item left out": ([SHOWN_TEXT, SHOWN_CALL], [SHOWN_TEXT]),
}


@pytest.mark.parametrize("retold", list(RETOLD))
async def test_an_item_the_terminal_event_retells_otherwise_ends_the_round_with_an_error_not_a_judged_other_answer(
    retold: str,
) -> None:
    """The round's answer is its terminal event's response, but the client acts on each item's `output_item.done`
    (Codex records its messages and runs its calls from them; the openai SDK gives it as the item's event): an item
    done one way and told another way in `response.completed` would have the hooks judge what the client never got.
    The round ends with the route's error event instead, its calls never run, whatever way its events are cut."""
    shown, told = RETOLD[retold]
    body = response(*shown)
    events = list(sse.responses_events(body))
    events[-1] = list(sse.responses_events({**body, "output": told}))[-1]
    for merged in (False, True):
        judged, (noted, ran) = JudgedAnswers(), noted_lookup()
        model = ScriptedModel(event_stream([b"".join(events)] if merged else events))
        app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted]), judged])
        async with http_client(app) as client:
            raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        got = [orjson.loads(event.data) for event in SSEReader().feed(raw.content)]
        assert got[-1]["type"] == "error", (merged, got[-1])
        assert "output differs" in got[-1]["message"]
        assert judged.answers == [] and ran == []


async def test_an_item_the_terminal_event_tells_as_it_was_done_is_judged_as_the_client_has_it() -> None:
    """The same round told alike in both places is judged and reaches the client's SDK as the app gave it."""
    body = response(SHOWN_TEXT, SHOWN_CALL)
    judged, (noted, _) = JudgedAnswers(), noted_lookup()
    model = ScriptedModel(event_stream(list(sse.responses_events(body))))
    sdk = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted]), judged]))
    async with sdk.responses.stream(model="m", input="hi") as stream:
        final = await stream.get_final_response()
    assert [item["arguments"] for item in judged.answers[0]["output"] if item["type"] == "function_call"] == [
        SHOWN_CALL["arguments"]
    ]
    assert final.output[1].arguments == SHOWN_CALL["arguments"]  # type: ignore[union-attr]


def _numbered_past(events: list[bytes]) -> list[bytes]:
    """The message's part announced, and its deltas given, at `content_index` 1: the SDK appends the part at 0."""
    return [
        e.replace(b'"content_index":0', b'"content_index":1')
        if e.startswith(_DELTA) or b"content_part.added\n" in e
        else e
        for e in events
    ]


@pytest.mark.parametrize(
    "placed",
    {
        "a delta before its part": lambda events: [*events[:3], events[4], events[3], *events[5:]],
        "a part and its deltas numbered past its place": _numbered_past,
        "deltas of a part never added": lambda events: [
            e.replace(b'"content_index":0', b'"content_index":1') if e.startswith(_DELTA) else e for e in events
        ],
    }.items(),
    ids=lambda placed: placed[0],
)
async def test_a_text_delta_of_a_part_the_client_does_not_have_ends_the_round_with_an_error_not_a_tool_call(
    placed: Any,
) -> None:
    """The openai SDK adds a text delta to the part at its `content_index` in the parts added so far (an IndexError
    where there is none): a delta of no such part reaches no text the client has, so the round cannot be judged as
    the client reads it, and ends with the route's error event, its call never run, however its events are cut."""
    body = response({**response("hello there")["output"][0], "id": "msg_2"}, function_call("lookup", {"key": "k"}))
    events = placed[1](list(sse.responses_events(body)))
    for last in await failed_both_ways(events):
        assert "no such output_text" in last["message"], last


async def failed_both_ways(events: list[bytes]) -> list[dict[str, Any]]:
    """The round of `events` (a call of `lookup` among them) streamed twice, each event in a chunk of its own (the
    lane) and all in one (the reader): each time it ends with an error event and the call never runs. The two error
    events."""
    errors = []
    for merged in (False, True):
        noted, ran = noted_lookup()
        model = ScriptedModel(event_stream([b"".join(events)] if merged else events), response("done"))
        async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])) as client:
            raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        got = [orjson.loads(event.data) for event in SSEReader().feed(raw.content)]
        assert got[-1]["type"] == "error", (merged, got[-1])
        assert ran == []
        errors.append(got[-1])
    return errors


def _after(kind: bytes, events: list[bytes]) -> list[bytes]:
    """A delta of the message's part inserted after the first event of `kind`."""
    at = next(n for n, e in enumerate(events) if e.startswith(b"event: " + kind + b"\n")) + 1
    return [*events[:at], delta(b" more", 0, item=b"msg_2"), *events[at:]]


TOLD_OTHERWISE = {
    "deltas that spell another text": lambda events: [
        e.replace(b'"delta":"hel', b'"delta":"HEL') if e.startswith(_DELTA) else e for e in events
    ],
    "deltas that spell it in part": lambda events: [e for e in events if b'"delta":"hel' not in e],
    "a delta after its part's text is done": lambda events: _after(b"response.output_text.done", events),
    "a delta after its item is done": lambda events: _after(b"response.output_item.done", events),
    "a delta that is not a string": lambda events: [
        e.replace(b'"delta":"hel', b'"delta":7,"x":"hel') if e.startswith(_DELTA) else e for e in events
    ],
    "deltas told otherwise at the end alone": lambda events: [
        e.replace(b"hel", b"HEL") if not e.startswith(_DELTA) else e for e in events
    ],
}


@pytest.mark.parametrize("told", list(TOLD_OTHERWISE))
async def test_text_deltas_that_spell_another_text_than_the_items_end_the_round_with_an_error_not_a_tool_call(
    told: str,
) -> None:
    """A client shows a message's text as its deltas spell it; the hooks judge the item's text (its
    `output_text.done`, `output_item.done` and the terminal's, each what another client keeps): deltas that spell
    another text, or come after the part or the item is done, or are not strings, end the round with the route's
    error event, its call never run, however the events are cut (each in a chunk of its own takes the lane)."""
    body = response({**response("hello there")["output"][0], "id": "msg_2"}, function_call("lookup", {"key": "k"}))
    events = TOLD_OTHERWISE[told](list(sse.responses_events(body, chunk_size=3)))
    await failed_both_ways(events)


async def test_an_event_of_a_known_name_whose_data_is_done_is_passed_over_as_the_reader_passes_it() -> None:
    """`data: [DONE]` is not the Responses API's, but some servers end their streams with it, under any event name:
    the relay passes it over, read whole or by the reader, and the client gets its answer."""
    events = list(sse.responses_events(response("all good")))
    events[3:3] = [b"event: response.output_text.done\ndata: [DONE]\n\n", b"event: error\ndata: [DONE]\n\n"]
    model = ScriptedModel(event_stream(events))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted_lookup()[0]])])
    async with openai_client(app).responses.stream(model="m", input="hi") as stream:
        final = await stream.get_final_response()
    assert final.output_text == "all good"


@pytest.mark.parametrize("depth", [300, 1000])
async def test_an_item_nested_deeper_than_orjson_writes_fails_the_stream_in_the_routes_shape(depth: int) -> None:
    """An item nested deeper than orjson writes (254 levels; it reads 1024) cannot be judged or written again: the
    client gets the route's failed stream (`response.failed`, then `error`), not a cut connection, nor, in the app's
    own bytes, an event deeper than its SDK's parser takes (Python's `json` stops near 1,000 levels)."""
    body = response("deep")
    body["output"][0]["deep"] = "DEEP"
    nested = b'"deep":' + b"[" * depth + b"]" * depth
    events = [event.replace(b'"deep":"DEEP"', nested) for event in sse.responses_events(body)]
    model = ScriptedModel(event_stream(events))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted_lookup()[0]])])
    async with http_client(app) as client:
        raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
    got = SSEReader().feed(raw.content)
    assert all(event.data.count(b"[") <= 254 for event in got)  # no event the client's parser may refuse
    kinds = [orjson.loads(event.data)["type"] for event in got]
    assert kinds[-2:] == ["response.failed", "error"], kinds
