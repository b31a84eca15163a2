"""The Responses and Chat lanes (`TextLane.pass_on`, `ChatRelay.pass_on`) give the client the very bytes the slow path
(the SSE reader, then `feed`) gives for the same events: text of every kind (plain ASCII, which the Responses lane
takes without a parse, non-ASCII, escapes, `%` and braces), ids holding `%` and braces (the lanes' templates are
`%` templates), odd sequence numbers (not from 0, a gap, a keep-alive between two deltas) and later rounds (each
delta written anew around its string)."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from conftest import http_client, openai_client
from streams import event_stream
from test_relays import CHAT, noted_lookup, same_json
from test_responses_relay import RESPONSES

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.sse_reader import SSEReader
from agentic_middleware.surfaces import StreamRelay
from agentic_middleware.testing import ScriptedModel, chat_completion, tool_call

TEXTS = [
    "Hello",
    " world, plain ASCII ~!#$&'()*+,-./:;<=>?@[]^_`{|}",
    "",
    "héllo € 😀",
    "\u2028 a line separator",
    'say "hi"',
    "back\\slash",
    "ends in a backslash\\",
    "line\nbreak\r\n",
    "tab\t and \x01 and \x7f",
    "%d %s %% 100% %(name)s %b",
    '{"braces": [1]}',
    '"}\n\n',
    "plain again",
]
IDS = ["msg_%d", "msg_50%_{x}", "msg_{0}%s%%", "msg_plain"]
SHAPES = ["padded", "logprobs", "bare"]
_DELTA = b"event: response.output_text.delta\n"


def lane_takes(text: str) -> bool:
    """Whether a delta of this text is spelled (by orjson) so that the Responses lane takes it: no quote within."""
    return b'"' not in orjson.dumps(text)[1:-1]


def responses_round(
    texts: list[str], item_id: str, first: int, gap: int | None, shape: str, round: int, call: bool
) -> list[bytes]:
    """A Responses round as a server streams it, each event orjson's: one message of `texts`' deltas (in `shape`),
    numbered from `first`, one number skipped before delta `gap`; with `call`, a function call after it."""
    numbers = itertools.count(first)

    def emit(kind: str, **data: Any) -> bytes:
        return sse.named_event(kind, {"type": kind, "sequence_number": next(numbers), **data})

    text = "".join(texts)
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    item = {"id": item_id, "type": "message", "status": "completed", "content": [part], "role": "assistant"}
    output: list[Any] = [item]
    if call:
        call_item = {"type": "function_call", "id": f"fc_{round}%d", "call_id": f"call_{round}", "name": "lookup"}
        output.append({**call_item, "arguments": '{"key":"k"}', "status": "completed"})
    body = {"id": f"resp_{round}%s{{x}}", "object": "response", "created_at": 1, "model": "m", "output": output}
    started = {**body, "status": "in_progress", "output": []}
    events = [emit("response.created", response=started), emit("response.in_progress", response=started)]
    events.append(emit("response.output_item.added", output_index=0, item={**item, "content": []}))
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events.append(emit("response.content_part.added", **at, part={**part, "text": ""}))
    for n, piece in enumerate(texts):
        if n == gap:
            next(numbers)
        ends: dict[str, Any] = {} if shape == "bare" else {"logprobs": []}
        if shape == "padded":
            ends["obfuscation"] = "aZ09xQ7kLm3PzR5t"[: 1 + n % 16]
        events.append(emit("response.output_text.delta", **at, delta=piece, **ends))
    events.append(emit("response.output_text.done", **at, text=text, logprobs=[]))
    events.append(emit("response.content_part.done", **at, part=part))
    events.append(emit("response.output_item.done", output_index=0, item=item))
    for index, extra in enumerate(output[1:], 1):
        events.append(emit("response.output_item.added", output_index=index, item={**extra, "arguments": ""}))
        events.append(emit("response.output_item.done", output_index=index, item=extra))
    events.append(emit("response.completed", response={**body, "status": "completed"}))
    return events


def relayed(relay: StreamRelay, events: list[bytes], lane: bool, keepalive_at: int | None) -> tuple[bytes, int]:
    """One round, each event in a chunk of its own: by the lane where it takes it (`lane`), else always by the reader
    and `feed`; with a keep-alive before event `keepalive_at`. What the client got, and how many events the lane
    took."""
    relay.begin_round()
    reader = SSEReader()
    got: list[bytes] = []
    taken = 0
    for n, event in enumerate(events):
        if n == keepalive_at and (alive := relay.keepalive()) is not None:
            got.append(alive)
        out = relay.pass_on(event) if lane and reader.between_events else None
        if out is None:
            got += [data for read in reader.feed(event) for data in relay.feed(read)]
        else:
            got.append(out)
            taken += 1
    return b"".join(got), taken


@pytest.mark.parametrize("item_id", IDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("first", "gap", "keepalive_at"), [(0, None, None), (7, 3, 6), (1000, 0, 9)])
def test_responses_lane_writes_the_bytes_the_reader_writes(
    item_id: str, shape: str, first: int, gap: int | None, keepalive_at: int | None
) -> None:
    """Two rounds (the first's call held), every event orjson's: the lane's bytes are the reader's, byte for byte,
    the hooks' answer the same, and the lane took every event (those its bytes do not take, parsed whole)."""
    lane, slow = RESPONSES.relay(None), RESPONSES.relay(None)
    assert lane is not None and slow is not None
    for round in (1, 2):
        events = responses_round(TEXTS, item_id, first, gap, shape, round, call=round == 1)
        got, taken = relayed(lane, events, True, keepalive_at)
        expected, none = relayed(slow, events, False, keepalive_at)
        assert none == 0
        assert got == expected
        assert same_json(lane.body()) == same_json(slow.body())
        # Each event in the one form: a delta by its bytes, or whole, parsed (`NAMED`); but the first, which the reader
        # reads (a stream's first bytes may be a byte order mark).
        assert taken == len(events) - 1
    final = same_json(lane.body())
    assert lane.finish(final) == slow.finish(final)


def chat_round(texts: list[str], chat_id: str, padded: bool, call: bool) -> list[bytes]:
    """A Chat round as a server streams it, each chunk orjson's, with `usage` (the middleware asks the app for it),
    one content chunk per text; with `padded`, OpenAI's `obfuscation` last in each chunk; with `call`, a tool call."""
    body = chat_completion(content="".join(texts), tool_calls=[tool_call("lookup", {"key": "k"})] if call else None)
    body["id"] = chat_id
    events = list(sse.chat_chunks(body, include_usage=True, chunk_size=10**6))
    role, rest = events[0], events[2:]  # the role chunk, then (after the content whole) the rest
    head, _, tail = role.partition(b'"delta":{')
    tail = tail.split(b"}", 1)[1]
    chunks = [role.replace(b'"content":' + orjson.dumps("".join(texts)), b'"content":""')]
    chunks += [head + b'"delta":{"content":' + orjson.dumps(text) + b"}" + tail for text in texts]
    chunks += rest
    if padded:
        chunks = [
            c if c == sse.DONE else c[:-3] + b',"obfuscation":"' + b"aZ09xQ7kLm3P"[: 1 + n % 12] + b'"}\n\n'
            for n, c in enumerate(chunks)
        ]
    return chunks


@pytest.mark.parametrize("chat_id", ["chatcmpl-%d", "chatcmpl-50%_{x}", "chatcmpl-plain"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_lane_writes_the_bytes_the_reader_writes(chat_id: str, padded: bool, include_usage: bool) -> None:
    """Two rounds (the second's chunks written anew with the first's id, and without the usage the client did not
    ask for): the lane's bytes are the reader's, byte for byte, and the lane took most content chunks."""
    lane, slow = CHAT.relay({"include_usage": include_usage}), CHAT.relay({"include_usage": include_usage})
    assert lane is not None and slow is not None
    for round in (1, 2):
        events = chat_round(TEXTS, f"{chat_id}{round}", padded, call=round == 1)
        assert events[1].find(b'"content":"Hello"') > 0
        got, taken = relayed(lane, events, True, None)
        expected, _ = relayed(slow, events, False, None)
        assert got == expected
        assert same_json(lane.body()) == same_json(slow.body())
        assert taken >= len(TEXTS) - 4  # a chunk the lane declines is read, and the one after it opens it again
    final = same_json(lane.body())
    assert lane.finish(final) == slow.finish(final)


@pytest.mark.parametrize("item_id", IDS)
async def test_a_percent_sign_in_an_item_id_reaches_the_client_as_the_app_streamed_it(item_id: str) -> None:
    """An item id is the app's: one holding `%` (a format's mark) or braces streams to the client as any other,
    through the lane (no error event, the openai SDK's text whole), in both rounds, and the bytes are those of the
    same rounds read in one chunk each (the reader's)."""
    streams = [
        responses_round(TEXTS[:2], item_id, 0, None, "padded", 1, call=True),
        responses_round(TEXTS, f"{item_id}2", 0, None, "padded", 2, call=False),
    ]

    async def run(merged: bool) -> tuple[bytes, str, list[str]]:
        noted, ran = noted_lookup()
        model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
        async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])) as client:
            raw = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
        sdk = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])]))
        async with sdk.responses.stream(model="m", input="hi") as stream:
            final = await stream.get_final_response()
        return raw.content, final.output_text, ran

    (passed, text, ran), read = await run(merged=False), await run(merged=True)
    assert b"event: error" not in passed and b"response.failed" not in passed
    assert text == "".join(TEXTS[:2]) + "".join(TEXTS)
    assert ran == ["k", "k"]
    assert (passed, text) == read[:2]
