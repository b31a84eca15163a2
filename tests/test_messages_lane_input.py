"""The Messages relay's lane for a call's input (`MessagesRelay.pass_on`): an `input_json_delta` of the open
`tool_use` block, in the Anthropic API's one shape, is taken unread, its `partial_json` kept as it is spelled and read
as JSON when the round ends. The client gets the bytes, and the hooks the body, that the reader's path gives for the
same events: a client tool's input passed on as it came (its index moved in a later round), a server tool's held and
never shown, escapes and a string that JSON cannot read handled as a text delta's, input that is not JSON read as
before."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from conftest import http_client
from streams import USER, anthropic_client, event_stream
from test_relays import MESSAGES, fed_round, noted_lookup, passed_round, same_json

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.sse_reader import SSEReader
from agentic_middleware.surfaces.messages_relay import MessagesRelay
from agentic_middleware.testing import ScriptedModel, message

# Pieces of a call's input as orjson spells them: quotes and backslashes of JSON within a JSON string, a piece
# ending in an escaped backslash, non-ASCII, a line end and a tab escaped, `%` and braces.
PIECES = ['{"path": "a \\"b\\"', ' \\\\", "text": "é € 😀', "\\n\\t %d %s {}", '", "n": [1, 2]}']
# The same kind of input spelled as orjson would not spell it (`\u` escapes, `\/`): the lane keeps it as it came.
SPELLED = [rb"{\"k\u0022: \"\u00e9", rb" \/ \\\\", rb"\u0041\"}"]
WANTED = {"path": 'a "b" \\', "text": "é € 😀\n\t %d %s {}", "n": [1, 2]}


def delta(index: int, spelled: bytes) -> bytes:
    """An `input_json_delta` in the API's own bytes, its `partial_json` spelled as given."""
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":'
        b'{"type":"input_json_delta","partial_json":"%b"}}\n\n' % (index, spelled)
    )


def calling(name: str, spelled: list[bytes], text: str = "Let me see.") -> list[bytes]:
    """A round with text, then a call of `name` whose `input_json_delta`s spell `spelled`, one event each."""
    body = message(text, usage={"input_tokens": 5, "output_tokens": 3})
    events = [sse.messages_start(body), *sse.messages_block(0, {"type": "text", "text": text})]
    start = {"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": {}}
    events.append(
        sse.named_event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": start})
    )
    events += [delta(1, piece) for piece in spelled]
    events.append(sse.named_event("content_block_stop", {"type": "content_block_stop", "index": 1}))
    return [*events, *sse.messages_end({**body, "stop_reason": "tool_use"})]


def read(spelled: list[bytes]) -> Any:
    """The input `spelled`'s pieces join into, each read as the client's SDK reads its event."""
    return orjson.loads("".join(orjson.loads(b'"' + piece + b'"') for piece in spelled))


def read_events(raw: bytes) -> list[tuple[str, Any]]:
    return [(event.event, orjson.loads(event.data)) for event in SSEReader().feed(raw)]


def orjsons(pieces: list[str]) -> list[bytes]:
    return [orjson.dumps(piece)[1:-1] for piece in pieces]


def took_deltas(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The `content_block_delta`s the relay parsed and took (`took`): none of those the lane takes unread."""
    parsed: list[Any] = []
    took = MessagesRelay.took

    def noted(relay: MessagesRelay, kind: str, payload: dict[str, Any], event: Any) -> Any:
        if kind == "content_block_delta":
            parsed.append(payload)
        return took(relay, kind, payload, event)

    monkeypatch.setattr(MessagesRelay, "took", noted)
    return parsed


@pytest.mark.parametrize("spelling", ["orjson's", "the app's own"])
def test_a_calls_input_deltas_on_the_lane_give_the_client_and_the_hooks_what_the_reader_gives(
    spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rounds, a server tool's call then a client tool's (its block's index moved after the first round's text):
    each round's bytes for the client and its body are the reader's, every input delta was taken unread, and the
    held events the final round's end writes are the reader's too: byte for byte when orjson spelled the input,
    else the same events read (the lane keeps the app's spelling, as it keeps a text delta's)."""
    spelled = orjsons(PIECES) if spelling == "orjson's" else SPELLED
    parsed = took_deltas(monkeypatch)
    lane, slow = MESSAGES.relay(None), MESSAGES.relay(None)
    assert isinstance(lane, MessagesRelay) and slow is not None
    for name in ("lookup", "client_tool"):
        events = calling(name, spelled)
        got, taken = passed_round(lane, events)
        parsed_by_reader = len(parsed)
        expected = fed_round(slow, b"".join(events), [])
        assert len(parsed) > parsed_by_reader  # the reader's path parses them
        del parsed[parsed_by_reader:]
        assert got == expected  # nothing in either: the call holds the round
        assert taken == len(events) - 1  # all but the first, which the reader reads (a byte order mark?)
        assert same_json(lane.body()) == same_json(slow.body())
        assert lane.body()["content"][1]["input"] == read(spelled)
    # The text deltas of the first round's blocks and the calls' input deltas were all the lane's: none parsed.
    assert [p for p in parsed if p["delta"]["type"] == "input_json_delta"] == []
    final = same_json(lane.body())
    held, read_held = b"".join(lane.finish(final)), b"".join(slow.finish(final))
    if spelling == "orjson's":
        assert held == read_held
    else:  # a later round's delta written anew by the reader's path is spelled by orjson; the lane keeps the app's
        assert read_events(held) == read_events(read_held) and held != read_held
    assert b"".join(delta(2, piece) for piece in spelled) in held  # moved after the first round's text block
    assert b'"index":1,"delta":{"type":"input_json' not in held


def test_input_deltas_out_of_the_one_shape_are_parsed_and_a_raw_control_character_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delta with another key after its string, or a space in its JSON, is not the lane's: it is parsed and taken
    as `feed` takes it, its piece in the call's input all the same. One with a raw control character in its string
    is not JSON: its parse raises, as the reader's does (the round cannot be read)."""
    parsed = took_deltas(monkeypatch)
    relay = MESSAGES.relay(None)
    assert relay is not None
    events = calling("client_tool", orjsons(['{"a": "', "x", '"}']))
    relay.begin_round()
    for event in events[:7]:
        assert relay.pass_on(event) is not None
    assert parsed == []
    assert relay.pass_on(delta(1, b"y").replace(b'"}}', b'","x":1}}')) == b""  # held with the call's start
    assert relay.pass_on(delta(1, b"z").replace(b'"partial_json":', b'"partial_json": ')) == b""
    assert [p["delta"]["partial_json"] for p in parsed] == ["y", "z"]
    with pytest.raises(orjson.JSONDecodeError):
        relay.pass_on(delta(1, b"tab\there"))
    for event in events[7:]:
        relay.pass_on(event)
    body = relay.body()
    assert body is not None and body["content"][1]["input"] == {"a": "xyz"}


async def served(rounds: list[list[bytes]]) -> tuple[bytes, list[str], int]:
    """One streaming request through the middleware (`lookup` a server tool) to an app that streams `rounds`, one
    event a chunk: the client's bytes, the keys `lookup` ran for and the app's calls."""
    noted, ran = noted_lookup()
    model = ScriptedModel(*(event_stream(events) for events in rounds))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])
    body = {"model": "m", "max_tokens": 50, "stream": True, "messages": USER}
    async with http_client(app) as client:
        response = await client.post("/v1/messages", json=body)
    assert response.status_code == 200
    return response.content, ran, len(model.requests)


async def test_a_server_tools_input_is_held_and_run_and_a_client_tools_reaches_the_client_whole() -> None:
    """Through the middleware, each event in a chunk of its own: the server tool's input deltas never reach the
    client and its tool runs on the input they join into; the client tool's reach it as the app spelled them, its
    index moved, and the anthropic SDK reads the input the app streamed."""
    server = [b'{\\"key\\": \\"k', b"\\u00e9\\\\\\\\", b'\\"}']  # {"key": "k\u00e9\\"}
    client = SPELLED
    raw, ran, calls = await served([calling("lookup", server), calling("client_tool", client, "Here.")])
    assert ran == ["ké\\"] and calls == 2
    for piece in server:
        assert b'"partial_json":"' + piece + b'"' not in raw
    assert b"".join(delta(2, piece) for piece in client) in raw
    model = ScriptedModel(event_stream(calling("lookup", server)), event_stream(calling("client_tool", client)))
    noted, _ = noted_lookup()
    sdk = anthropic_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])]))
    async with sdk.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
        final = await stream.get_final_message()
    assert [block.type for block in final.content] == ["text", "text", "tool_use"]
    assert final.content[2].input == read(client) == {"k": "é / \\A"}


@pytest.mark.parametrize("spelled", [b"a\\x", b"\xff\xfe", b"\\ud83d"])
async def test_a_held_input_delta_whose_string_is_not_json_fails_the_round_and_no_tool_runs(spelled: bytes) -> None:
    """Taken unread and read at the round's end, a server tool's input delta whose string JSON cannot read fails
    the round as the reader's parse of it does: the route's error event, the tool never run, the delta never
    shown."""
    pieces = [b'{\\"key\\": \\"', spelled, b'\\"}']
    raw, ran, calls = await served([calling("lookup", pieces)])
    last = [line for line in raw.splitlines() if line.startswith(b"data: ")][-1]
    error = orjson.loads(last[6:])
    assert error["type"] == "error" and "could not be read" in error["error"]["message"]
    assert ran == [] and calls == 1
    assert spelled not in raw


async def test_a_calls_input_that_is_not_json_reaches_the_hooks_as_before() -> None:
    """Input that is cut short is no reason to end the stream (`_tool_input`): the lane's body gives it under
    `_raw`, as the reader's does."""
    events = calling("client_tool", orjsons(['{"city": "Par']))
    lane, slow = MESSAGES.relay(None), MESSAGES.relay(None)
    assert lane is not None and slow is not None
    passed_round(lane, events)
    fed_round(slow, b"".join(events), [])
    assert lane.body() == slow.body()
    assert lane.body()["content"][1]["input"] == {"_raw": '{"city": "Par'}
