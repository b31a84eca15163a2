"""Stream relays: the answer read from any chunking of a round's stream is the JSON body, and the
client's stream across rounds is one that the SDKs' accumulators parse."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from conftest import http_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import USER, anthropic_client, anthropic_final, cut, event_stream, openai_final, sdk_dump, sse_app

from agentic_middleware import AgenticLoopMiddleware, CustomLogger, ServerTool, ServerTools, server_tool, sse
from agentic_middleware.observe import sum_usage
from agentic_middleware.sse_reader import ServerSentEvent, SSEReader
from agentic_middleware.surfaces import AppStreamError, StreamMismatch, StreamRelay, surfaces
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use

MESSAGES = surfaces()["messages"]
CHAT = surfaces()["chat_completions"]
SERVER_TOOL = "lookup"

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
inputs = st.dictionaries(st.sampled_from(["q", "n", "é"]), st.one_of(st.integers(-(2**53), 2**53), texts), max_size=3)


@st.composite
def messages_round(draw: st.DrawFn, final: bool) -> dict[str, Any]:
    leading = draw(
        st.lists(
            st.one_of(
                texts.map(lambda text: {"type": "text", "text": text}),
                st.tuples(texts, texts).map(lambda t: {"type": "thinking", "thinking": t[0], "signature": t[1]}),
            ),
            max_size=3,
        )
    )
    calls = [tool_use("client_tool", value) for value in draw(st.lists(inputs, max_size=2))]
    if not final:
        calls += [tool_use(SERVER_TOOL, value) for value in draw(st.lists(inputs, min_size=1, max_size=2))]
        calls = draw(st.permutations(calls))
    usage = {"input_tokens": draw(st.integers(0, 500)), "output_tokens": draw(st.integers(0, 500))}
    return message(*leading, *calls, usage=usage)


@st.composite
def chat_round(draw: st.DrawFn, final: bool) -> dict[str, Any]:
    content = draw(st.one_of(st.none(), texts))
    calls = [tool_call("client_tool", value) for value in draw(st.lists(inputs, max_size=2))]
    if not final:
        calls += [tool_call(SERVER_TOOL, value) for value in draw(st.lists(inputs, min_size=1, max_size=2))]
        calls = draw(st.permutations(calls))
    tokens = draw(st.integers(0, 500)), draw(st.integers(0, 500))
    usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)}
    return chat_completion(content=content, tool_calls=calls or None, usage=usage)


def relay_round(relay: StreamRelay, stream: bytes, cuts: list[int]) -> list[bytes]:
    """Feed one round's stream, cut at `cuts`, through a reader and the relay; what the client got now."""
    relay.begin_round()
    reader = SSEReader()
    sent: list[bytes] = []
    for chunk in cut(stream, cuts):
        relay.read(reader, chunk, sent)
    return sent


def same_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


rounds_settings = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@rounds_settings
@given(data=st.data(), count=st.integers(1, 3), chunk_size=st.integers(1, 12))
def test_messages_rounds_accumulate_exactly_and_the_client_stream_parses(
    data: st.DataObject, count: int, chunk_size: int
) -> None:
    bodies = [data.draw(messages_round(final=number == count - 1)) for number in range(count)]
    relay = MESSAGES.relay(None)
    assert relay is not None
    client: list[bytes] = []
    expected: list[dict[str, Any]] = []
    for body in bodies:
        stream = b"".join(sse.messages_events(body, chunk_size=chunk_size))
        client += relay_round(relay, stream, data.draw(st.lists(st.integers(0, 10**6), max_size=20)))
        assert same_json(relay.body()) == same_json(body)  # what the hooks judge: the JSON body itself
        blocks = body["content"]
        first_call = next((i for i, b in enumerate(blocks) if b["type"] == "tool_use"), len(blocks))
        expected += blocks if body is bodies[-1] else blocks[:first_call]
    final = {**bodies[-1], "usage": sum_usage([body["usage"] for body in bodies])}
    client += relay.finish(same_json(final))

    assert b'"name":"lookup"' not in b"".join(client)  # a server tool call never reaches the client
    got = sdk_dump(asyncio.run(anthropic_final(client)))
    assert got["content"] == sdk_dump(anthropic.types.Message.model_validate({**final, "content": expected}))["content"]
    assert got["stop_reason"] == final["stop_reason"]
    assert got["usage"]["input_tokens"] == final["usage"]["input_tokens"]
    assert got["usage"]["output_tokens"] == final["usage"]["output_tokens"]
    assert got["id"] == bodies[0]["id"]


@rounds_settings
@given(data=st.data(), count=st.integers(1, 3), chunk_size=st.integers(1, 12), include_usage=st.booleans())
def test_chat_rounds_accumulate_exactly_and_the_client_stream_parses(
    data: st.DataObject, count: int, chunk_size: int, include_usage: bool
) -> None:
    bodies = [data.draw(chat_round(final=number == count - 1)) for number in range(count)]
    relay = CHAT.relay({"include_usage": include_usage})
    assert relay is not None
    client: list[bytes] = []
    for body in bodies:
        stream = b"".join(sse.chat_chunks(body, include_usage=True, chunk_size=chunk_size))  # as asked of the app
        client += relay_round(relay, stream, data.draw(st.lists(st.integers(0, 10**6), max_size=20)))
        assert same_json(relay.body()) == same_json(body)
    final = {**bodies[-1], "usage": sum_usage([body["usage"] for body in bodies])}
    client += relay.finish(same_json(final))

    stream = b"".join(client)
    assert b'"name":"lookup"' not in stream
    assert stream.count(b"[DONE]") == 1 and stream.endswith(b"data: [DONE]\n\n")
    chunks = [orjson.loads(line[6:]) for line in stream.split(b"\n\n") if line.startswith(b"data: {")]
    assert {(chunk["id"], chunk["created"]) for chunk in chunks} == {(bodies[0]["id"], bodies[0]["created"])}
    usages = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    assert usages == ([final["usage"]] if include_usage else [])
    assert all(("usage" in chunk) == include_usage for chunk in chunks)

    got = sdk_dump(asyncio.run(openai_final(client)))
    choice = got["choices"][0]
    texts = [body["choices"][0]["message"]["content"] for body in bodies]
    assert (choice["message"]["content"] or "") == "\n\n".join(text for text in texts if text)
    assert choice["message"]["role"] == "assistant"
    final_calls = final["choices"][0]["message"].get("tool_calls") or []

    def calls(listed: Any) -> list[tuple[str, str, str]]:
        return [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in listed or []]

    assert calls(choice["message"]["tool_calls"]) == calls(final_calls)
    assert choice["finish_reason"] == final["choices"][0]["finish_reason"]


def test_held_events_go_out_as_the_app_sent_them_when_no_hook_acts() -> None:
    body = message("Checking.", tool_use("client_tool", {"x": "y" * 50}, id="toolu_c"))
    stream = b"".join(sse.messages_events(body, chunk_size=7))
    relay = MESSAGES.relay(None)
    assert relay is not None
    now = relay_round(relay, stream, [])
    rest = relay.finish(same_json(body))
    events = [event for chunk in now + rest for event in SSEReader().feed(chunk)]
    app_events = SSEReader().feed(stream)
    assert events == [event for event in app_events if event.event != "ping"]
    assert len(now) == 5  # message_start and the text block (two deltas) went out at once; the call was held


def test_a_response_override_follows_what_was_streamed_as_new_blocks() -> None:
    relay = MESSAGES.relay(None)
    assert relay is not None
    first = message("Let me look.", tool_use(SERVER_TOOL, {"q": 1}))
    client = relay_round(relay, b"".join(sse.messages_events(first)), [5, 50])
    override = message("The override.")
    client += relay.finish(same_json(override), fresh=True)
    got = asyncio.run(anthropic_final(client))
    assert [block.text for block in got.content if block.type == "text"] == ["Let me look.", "The override."]


@pytest.mark.parametrize("surface", [MESSAGES, CHAT], ids=["messages", "chat"])
def test_a_final_answer_that_rewrites_streamed_text_is_refused(surface: Any) -> None:
    relay = surface.relay(None)
    if surface is MESSAGES:
        body, changed = message("The secret is 42."), message("The secret is [redacted].")
        stream = b"".join(sse.messages_events(body))
    else:
        body, changed = chat_completion("The secret is 42."), chat_completion("The secret is [redacted].")
        stream = b"".join(sse.chat_chunks(body, include_usage=True))
    relay_round(relay, stream, [])
    with pytest.raises(StreamMismatch):
        relay.finish(same_json(changed))
    extended = same_json(body)  # an answer that only adds to what went out is fine
    if surface is MESSAGES:
        extended["content"].append({"type": "text", "text": "Appended."})
    else:
        extended["choices"][0]["message"]["content"] += " Appended."
    assert b"Appended." in b"".join(relay.finish(extended))


def test_a_final_answer_that_extends_the_last_streamed_text_streams_the_rest() -> None:
    """A post hook appending to the final text: the rest follows as a text block of its own."""
    relay = MESSAGES.relay(None)
    assert relay is not None
    client = relay_round(relay, b"".join(sse.messages_events(message("Let me look.", tool_use(SERVER_TOOL, {})))), [])
    relay.begin_round()
    last = message("The answer")
    client += relay_round(relay, b"".join(sse.messages_events(last)), [3])
    cited = same_json(last)
    cited["content"][-1]["text"] += " (source: x)"
    client += relay.finish(cited)
    got = asyncio.run(anthropic_final(client))
    assert [block.text for block in got.content if block.type == "text"] == [
        "Let me look.",
        "The answer",
        " (source: x)",
    ]
    relay = MESSAGES.relay(None)
    relay_round(relay, b"".join(sse.messages_events(last)), [])
    with pytest.raises(StreamMismatch):  # text that went out, changed, is still a rewrite
        relay.finish(same_json(message("The answex (source: x)")))


def test_nothing_streamed_writes_the_whole_answer() -> None:
    body = chat_completion("All at once.", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
    relay = CHAT.relay({"include_usage": True})
    assert relay is not None
    assert b"".join(relay.finish(body)) == b"".join(sse.chat_chunks(body, include_usage=True))


@pytest.mark.parametrize(
    ("surface", "event"),
    [
        (MESSAGES, ServerSentEvent("error", b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}')),
        (CHAT, ServerSentEvent("", b'{"error":{"message":"busy","type":"server_error"}}')),
    ],
    ids=["messages", "chat"],
)
def test_the_apps_error_event_is_raised_with_its_body(surface: Any, event: ServerSentEvent) -> None:
    relay = surface.relay(None)
    relay.begin_round()
    with pytest.raises(AppStreamError) as raised:
        relay.feed(event)
    assert raised.value.body == event.data


def test_a_round_whose_stream_ends_early_has_no_body() -> None:
    stream = b"".join(sse.messages_events(message("cut short")))
    relay = MESSAGES.relay(None)
    assert relay is not None
    relay_round(relay, stream[: len(stream) // 2], [])
    assert relay.body() is None
    chat = CHAT.relay(None)
    assert chat is not None
    relay_round(chat, b"".join(list(sse.chat_chunks(chat_completion("x"), include_usage=True))[:2]), [])
    assert chat.body() is None


def test_chat_asks_the_app_for_usage_and_keeps_the_clients_options() -> None:
    assert CHAT.streaming_request({"stream": True})["stream_options"] == {"include_usage": True}
    body = {"stream": True, "stream_options": {"include_obfuscation": False}}
    assert CHAT.streaming_request(body)["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert MESSAGES.streaming_request(body) is body


def fed_round(relay: StreamRelay, stream: bytes, cuts: list[int]) -> list[bytes]:
    """As `relay_round`, every event read by the reader and fed to the relay: never the relay's `pass_on`."""
    relay.begin_round()
    reader = SSEReader()
    return [data for chunk in cut(stream, cuts) for event in reader.feed(chunk) for data in relay.feed(event)]


def every(out: bytes) -> bool:
    return True


def passed_round(
    relay: StreamRelay, events: list[bytes], counted: Callable[[bytes], bool] = every
) -> tuple[list[bytes], int]:
    """One round as a live stream reads it, each event in a chunk of its own: `pass_on` where it takes the event
    (between two events), else the reader and `feed`. What the client got, and how many events `pass_on` took (of
    those it took, the ones `counted` names by what went out: by default every one)."""
    relay.begin_round()
    reader = SSEReader()
    got: list[bytes] = []
    taken = 0
    for event in events:
        out = relay.pass_on(event) if reader.between_events else None
        if out is None:
            got += [data for read in reader.feed(event) for data in relay.feed(read)]
        else:
            if out:  # empty: taken, nothing for the client now
                got.append(out)
            taken += counted(out)
    return got, taken


@rounds_settings
@given(data=st.data(), count=st.integers(1, 3), chunk_size=st.integers(1, 12))
def test_events_passed_on_unread_give_the_client_and_the_hooks_what_reading_each_gives(
    data: st.DataObject, count: int, chunk_size: int
) -> None:
    """A stream that writes each event in a chunk of its own (as model servers do) takes the relay's cheap path for
    its deltas (`pass_on`: the bytes as they came, the index moved after earlier rounds, read in batches): the client
    gets the same bytes, and the hooks the same body, as when every event is read and fed."""
    passed, fed = MESSAGES.relay(None), MESSAGES.relay(None)
    for number in range(count):
        body = data.draw(messages_round(final=number == count - 1))
        events = list(sse.messages_events(body, chunk_size=chunk_size))
        passed.begin_round()
        reader = SSEReader()
        got: list[bytes] = []
        for event in events:
            passed.read(reader, event, got)
        assert got == fed_round(fed, b"".join(events), data.draw(st.lists(st.integers(0, 10**6), max_size=20)))
        assert same_json(passed.body()) == same_json(fed.body()) == same_json(body)


@server_tool
async def lookup(key: str) -> str:
    return key


BROKEN_DELTAS = [
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta"\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":"x"},"type":"content_block_start"}\n\n',  # another event under the delta's name: JSON's last key wins
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":7,"delta":{"type":"text_delta",'
    b'"text":"x"}}\n\n',  # a block never started
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":5}}\n\n',  # text that is not a string, which the SDKs' accumulators cannot add (a TypeError there)
]


@pytest.mark.parametrize("broken", BROKEN_DELTAS)
async def test_a_delta_passed_on_unread_that_is_not_a_readable_delta_fails_the_round(broken: bytes) -> None:
    events = list(sse.messages_events(message("hello there, world", usage={"input_tokens": 1, "output_tokens": 2})))
    events.insert(3, broken)  # after message_start, content_block_start and one good delta
    app = AgenticLoopMiddleware(sse_app(events), hooks=[ServerTools([lookup])])
    client = anthropic_client(app)
    with pytest.raises(anthropic.APIStatusError, match="could not be read"):
        async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
            await stream.get_final_message()


@pytest.mark.parametrize("text", ['a",b', 'x\\",\\', "\\u00e9 é \u2028", 'say "hi", then \\"bye\\"'])
async def test_a_streamed_text_whose_pieces_end_in_an_escaped_quote_or_backslash_reaches_the_hooks_whole(
    text: str,
) -> None:
    """Pieces of a block's text that the lane cannot take (a quote within) are kept spelled anew beside those it
    takes: however they end (an escaped quote then the comma that follows every piece, a backslash), the hooks and
    the client read the same text."""
    judged: list[str] = []

    class Judge(CustomLogger):
        agentic_loop_streaming = "live"

        async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> tuple[bool, dict[str, Any]]:
            judged.append(response.content[0].text)
            return False, {}

    events = list(sse.messages_events(message(text), chunk_size=3))
    client = anthropic_client(AgenticLoopMiddleware(ScriptedModel(event_stream(events)), hooks=[Judge()]))
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()
    assert [block.text for block in final.content if block.type == "text"] == [text] and judged == [text]


def test_a_delta_whose_string_holds_escapes_is_taken_unread_and_read_as_the_reader_reads_it() -> None:
    """Escaped quotes and backslashes, a string ending in one, escapes orjson would not write, DEL and U+0085
    raw (JSON strings hold them as they are): the lane takes every text delta of such a text unread (the first
    quote its backslashes leave unescaped closes the string), keeping each as it is spelled, and the client and the
    hooks get what reading each event gives."""
    spelled = [
        rb"say \"hi\", \/",
        rb" then \/ \u0041",
        rb" ends in \u0041\\",
        rb"\"\/",
        rb"\u00e9 \n\t",
        b"\x7f\xc2\x85",
    ]
    deltas = [_LANE + piece + b'"}}\n\n' for piece in spelled]
    body = message("")
    events = list(sse.messages_events(body))
    events[2:2] = deltas
    relay, fed = MESSAGES.relay(None), MESSAGES.relay(None)
    relay.begin_round()
    reader = SSEReader()
    got = [data for event in events[:2] for read in reader.feed(event) for data in relay.feed(read)]
    for delta in deltas:
        assert relay.pass_on(delta) is delta
    assert bytes(relay.lane_text) == b"".join(piece + b'","' for piece in spelled)  # as spelled: none read
    got += deltas
    got += [data for event in events[2 + len(deltas) :] for read in reader.feed(event) for data in relay.feed(read)]
    assert got == fed_round(fed, b"".join(events), [])
    text = 'say "hi", / then / A ends in A\\"/é \n\t\x7f\x85'
    assert (
        same_json(relay.body())
        == same_json(fed.body())
        == same_json({**body, "content": [{"type": "text", "text": text}]})
    )


_LANE = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'
)


MISSPELLED = [  # a text delta in the shape `pass_on` takes unread, whose string JSON cannot read
    b"a\\x",  # an escape JSON does not have
    b"\xff\xfe",  # not UTF-8
    b"\\ud83d",  # half of a character (orjson refuses it)
]


def noted_lookup() -> tuple[ServerTool, list[str]]:
    """A `lookup` server tool that notes the key of each call it runs (none, when a round fails closed)."""
    ran: list[str] = []

    @server_tool(name="lookup")
    async def noted(key: str) -> str:
        ran.append(key)
        return key

    return noted, ran


@pytest.mark.parametrize("spelled", MISSPELLED)
async def test_a_delta_taken_unread_whose_string_is_not_json_ends_the_round_with_an_error_not_a_tool_call(
    spelled: bytes,
) -> None:
    """The open block's text deltas are read when the block ends (`Spelled`): one whose string is not JSON reached
    the client as the app sent it, and then the round cannot be read. It ends with the route's error event, its
    tool call never runs, and no answer of it is judged."""
    bad, response, error = await with_delta_spelled(spelled)
    assert bad in response.content  # it reached the client as it came
    assert "could not be read" in error["error"]["message"]


async def with_delta_spelled(spelled: bytes) -> tuple[bytes, httpx2.Response, dict[str, Any]]:
    """A streamed round whose text block gets one more delta whose string is `spelled` as it is, then a call of
    `lookup`: the delta, the client's response and its last event, checked to be an error event; the call never ran
    and the app was called once."""
    noted, ran = noted_lookup()
    events = list(sse.messages_events(message("hello", tool_use("lookup", {"key": "k"}, "toolu_1"))))
    bad = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
        b'"text":"' + spelled + b'"}}\n\n'
    )
    events.insert(3, bad)  # after message_start, content_block_start and the block's one delta
    model = ScriptedModel(event_stream(events))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])
    async with http_client(app) as client:
        response = await client.post(
            "/v1/messages", json={"model": "m", "max_tokens": 9, "messages": USER, "stream": True}
        )
    assert response.status_code == 200
    last = [line for line in response.text.splitlines() if line.startswith("data: ")][-1]
    error = orjson.loads(last[6:])
    assert error["type"] == "error"
    assert ran == [] and len(model.requests) == 1
    return bad, response, error


@pytest.mark.parametrize(
    "spelled",
    [
        b"a\n\nevent: message_stop\ndata: {\\u0022type\\u0022:\\u0022message_stop\\u0022}\n\nb",
        b"a\rb",
        b"a\nb",
        b"a\tb",
    ],
)
async def test_a_delta_whose_string_holds_a_line_end_never_reaches_the_client_and_no_tool_runs(spelled: bytes) -> None:
    """A raw line end within a delta's string would cut the client's event in two (SSE ends a line at CR or LF), so
    such a delta is not taken unread, nor one with any other raw control character (which no JSON string holds): the
    reader reads it, the client never gets its bytes, the round ends with the route's error event and its tool call
    never runs."""
    _, response, _ = await with_delta_spelled(spelled)
    assert spelled not in response.content and b"message_stop" not in response.content


CUT = [  # a character's UTF-8 cut between two deltas: neither line is UTF-8, as the client's SDK decodes each
    (b"\xe2\x82", b"\xac"),  # the euro sign
    (b"a\xc3", b"\xa9b"),
    (b"\xf0\x9f", b"\x98\x80 ok"),  # a smiley, four bytes
]


@pytest.mark.parametrize("kind", ["text", "thinking"])
@pytest.mark.parametrize(("head", "tail"), CUT)
async def test_a_character_cut_between_two_deltas_taken_unread_ends_the_round_with_an_error_not_a_tool_call(
    kind: str, head: bytes, tail: bytes
) -> None:
    """Each delta's string is read on its own, as the client's SDK reads each event's line (it decodes it as UTF-8,
    strictly, and raises on half a character): two deltas that are UTF-8 only when joined are not readable, so the
    round ends with the error event and its tool call never runs, as when one delta alone is not UTF-8."""
    noted, ran = noted_lookup()

    block: dict[str, Any] = {"type": "text", "text": "hello"}
    if kind == "thinking":
        block = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    events = list(sse.messages_events(message(block, tool_use("lookup", {"key": "k"}, "toolu_1"))))
    start = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"%s_delta",'
        b'"%s":"' % (kind.encode(), kind.encode())
    )
    halves = [start + head + b'"}}\n\n', start + tail + b'"}}\n\n']
    events[3:3] = halves  # after message_start, content_block_start and the block's one delta
    model = ScriptedModel(event_stream(events), event_stream(list(sse.messages_events(message("done")))))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])) as client:
        response = await client.post(
            "/v1/messages", json={"model": "m", "max_tokens": 9, "messages": USER, "stream": True}
        )
    with pytest.raises(UnicodeDecodeError):  # what the SDK makes of the app's own stream
        await anthropic_final(events)
    assert b"".join(halves) in response.content  # they reached the client as they came
    last = [line for line in response.text.splitlines() if line.startswith("data: ")][-1]
    error = orjson.loads(last[6:])
    assert error["type"] == "error" and "could not be read" in error["error"]["message"]
    assert ran == [] and len(model.requests) == 1


def _started(index: int, block: dict[str, Any]) -> bytes:
    return sse.named_event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
    )


OUT_OF_PLACE = {  # blocks started where the client's SDK, which places each block by the order they start, would not
    "a second start for block 0": lambda events: [
        *events[:4],  # message_start, the text block's start and its two deltas
        _started(0, {"type": "thinking", "thinking": "", "signature": ""}),
        *events[4:],
    ],
    "a block started before message_start": lambda events: [events[1], events[0], *events[2:]],
    "the first block numbered 1": lambda events: [
        re.sub(rb'"index":0([,}])', rb'"index":1\1', event) if b'"index":0' in event else event for event in events
    ],
}


@pytest.mark.parametrize("shape", list(OUT_OF_PLACE))
async def test_a_block_started_out_of_its_place_ends_the_round_with_an_error_not_a_tool_call(shape: str) -> None:
    """The client's SDK places a block by the order it starts and adds each delta to the block at its `index` in
    that list: a second start for one index (the text shown in the first block, the hooks given only the second, a
    thinking one), a block before the message's start or a first block numbered 1 (the SDK fails on them), leave the
    hooks judging another message than the client's. The round ends with the error event, its tool call never run."""
    noted, ran = noted_lookup()

    events = list(sse.messages_events(message("shown", tool_use("lookup", {"key": "k"}, "toolu_1"))))
    events.insert(3, events[2].replace(b"shown", b" text"))  # a second delta of the text block
    events = OUT_OF_PLACE[shape](events)
    if shape == "a second start for block 0":
        final = await anthropic_final(events)  # the SDK reads it: the text is its first block's
        assert [block.type for block in final.content[:2]] == ["text", "thinking"]
        assert final.content[0].text == "shown text"  # type: ignore[union-attr]
    else:
        with pytest.raises(IndexError):  # on the first delta: the SDK has no block at its index
            await anthropic_final(events)
    model = ScriptedModel(event_stream(events), event_stream(list(sse.messages_events(message("done")))))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])])) as client:
        response = await client.post(
            "/v1/messages", json={"model": "m", "max_tokens": 9, "messages": USER, "stream": True}
        )
    last = [line for line in response.text.splitlines() if line.startswith("data: ")][-1]
    error = orjson.loads(last[6:])
    assert error["type"] == "error" and "could not be read" in error["error"]["message"]
    assert ran == [] and len(model.requests) == 1


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse.named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


async def test_a_delta_of_a_kind_its_block_does_not_take_is_left_out_of_the_hooks_answer_as_the_sdk_leaves_it() -> None:
    """The SDKs add a text or citations delta to a text block only, a thinking or signature delta to a thinking block
    only, tool input to a tool call only, and leave out any other: the hooks judge the same blocks, not a thinking
    block with a `text` the client never shows (nor a text block with a forged `signature`, sent back to the app)."""
    judged: list[Any] = []

    class Judge(CustomLogger):
        agentic_loop_streaming = "live"

        async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> tuple[bool, dict[str, Any]]:
            judged.append(orjson.loads(orjson.dumps(response)))
            return False, {}

    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    events = list(sse.messages_events(message(thinking, "shown")))
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0, "start_char_index": 0}
    events[7:7] = [  # into the text block, before its stop
        _delta(1, {"type": "thinking_delta", "thinking": "unseen"}),
        _delta(1, {"type": "signature_delta", "signature": "forged"}),
        _delta(1, {"type": "input_json_delta", "partial_json": '{"a": 1}'}),
    ]
    events[4:4] = [  # into the thinking block, before its stop
        _delta(0, {"type": "text_delta", "text": "unseen"}),
        _delta(0, {"type": "citations_delta", "citation": {**citation, "end_char_index": 1}}),
        _delta(0, {"type": "input_json_delta", "partial_json": '{"a": 1}'}),
    ]
    client = anthropic_client(AgenticLoopMiddleware(ScriptedModel(event_stream(events)), hooks=[Judge()]))
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()
    assert sdk_dump(final) == sdk_dump(await anthropic_final(events))  # the client reads what the app's stream holds
    assert [(block.type, getattr(block, "text", None)) for block in final.content] == [
        ("thinking", None),
        ("text", "shown"),
    ]
    assert judged[0]["content"] == [thinking, {"type": "text", "text": "shown"}]


TWICE = [  # a delta naming its block twice, as JSON allows: its last key wins, in orjson, Python's json and JSON.parse
    b'"index":0,"index":0,',
    b'"index":0,"index" : 0,',
    b'"index":0,"\\u0069ndex":0,',  # the second key spelled with an escape
]


@pytest.mark.parametrize("index", TWICE)
async def test_a_later_rounds_delta_that_names_its_block_twice_reaches_the_client_in_that_block(index: bytes) -> None:
    """The client reads a later round's delta in the block the hooks' answer has it in: its index moves after the
    earlier rounds' blocks whichever of its keys the client's JSON reads, never back into an earlier round's block."""
    first = sse.messages_events(message("Let me check.", tool_use("lookup", {"key": "k"}, "toolu_1")))
    second = list(sse.messages_events(message("The answer")))
    assert second[2].startswith(b"event: content_block_delta\n")
    second[2] = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta",'
        + index
        + b'"delta":{"type":"text_delta","text":"The answer"}}\n\n'
    )
    model = ScriptedModel(event_stream(first), event_stream(second))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()
    assert [(block.type, getattr(block, "text", None)) for block in final.content] == [
        ("text", "Let me check."),
        ("text", "The answer"),
    ]
    assert len(model.requests) == 2


@pytest.mark.parametrize("chunks", ["own", "shared"])
async def test_an_event_whose_type_is_not_utf8_reaches_the_client_decoded_as_the_standard_decodes_it(
    chunks: str,
) -> None:
    """An event of a type the relay does not know goes on as it came, but its type decoded as the HTML standard
    decodes the stream (U+FFFD for what is not UTF-8): the SDKs decode strictly, so the app's bytes would make them
    raise a UnicodeDecodeError, where they skip an event of a type they do not know."""
    events = list(sse.messages_events(message("hello")))
    odd = b"event: x\xffy\ndata: {}\n\n"
    if chunks == "own":
        events.insert(2, odd)
    else:
        events[2] = events[2] + odd
    client = anthropic_client(AgenticLoopMiddleware(sse_app(events), hooks=[ServerTools([lookup])]))
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()
    assert [block.text for block in final.content if block.type == "text"] == ["hello"]
