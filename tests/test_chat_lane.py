"""The Chat relay's lane (`ChatRelay.pass_on`): a chunk that adds to a choice's content as the last one read did is
taken without the SSE reader, its string kept as spelled; the client and the hooks get what reading each gives."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from conftest import http_client, openai_client
from hypothesis import given
from hypothesis import strategies as st
from streams import event_stream
from test_relays import CHAT, chat_round, fed_round, noted_lookup, passed_round, rounds_settings, same_json

from agentic_middleware import AgenticLoopMiddleware, CustomLogger, ServerTools, sse
from agentic_middleware.sse_reader import SSEReader
from agentic_middleware.surfaces.chat_relay import ChatRelay
from agentic_middleware.testing import ScriptedModel, chat_completion, tool_call

USER: Any = [{"role": "user", "content": "hi"}]


@rounds_settings
@given(
    data=st.data(),
    count=st.integers(1, 3),
    chunk_size=st.integers(1, 12),
    include_usage=st.booleans(),
    obfuscated=st.booleans(),
)
def test_chat_chunks_passed_on_unread_give_the_client_and_the_hooks_what_reading_each_gives(
    data: st.DataObject, count: int, chunk_size: int, include_usage: bool, obfuscated: bool
) -> None:
    """A stream that writes each chunk in a message of its own takes the lane for the content after its first
    content chunk: the client gets the same bytes (a later round's id and `created`, no usage the client did not
    ask for, each chunk's own `obfuscation` padding where OpenAI adds it) and the hooks the same answer as when
    every chunk is read and fed, whatever the text."""
    passed, fed = CHAT.relay({"include_usage": include_usage}), CHAT.relay({"include_usage": include_usage})
    assert passed is not None and fed is not None
    taken = 0
    for number in range(count):
        body = data.draw(chat_round(final=number == count - 1))
        events = list(sse.chat_chunks(body, include_usage=True, chunk_size=chunk_size))  # as asked of the app
        if obfuscated:
            events = padded(events)
        got, taken_now = passed_round(passed, events)
        taken += taken_now
        assert got == fed_round(fed, b"".join(events), data.draw(st.lists(st.integers(0, 10**6), max_size=20)))
        assert same_json(passed.body()) == same_json(fed.body()) == same_json(body)
    final = same_json(body)
    assert passed.finish(final) == fed.finish(final)
    content = body["choices"][0]["message"]["content"]
    if count == 1 and isinstance(content, str) and len(content) >= 3 * chunk_size and content.isalnum():
        assert taken >= len(content) // chunk_size - 2  # every content chunk after the first ones took the lane


def padded(events: list[bytes]) -> list[bytes]:
    """The chunks as OpenAI writes them by default: each with an `obfuscation` value of its own, last."""
    alphabet = b"aZ09xQ7kLm3PzR5t"
    return [
        event if event == b"data: [DONE]\n\n" else event[:-3] + b',"obfuscation":"' + alphabet[: 1 + n % 16] + b'"}\n\n'
        for n, event in enumerate(events)
    ]


def chunks(content: str, calls: list[dict[str, Any]] | None = None) -> list[bytes]:
    return list(sse.chat_chunks(chat_completion(content=content, tool_calls=calls), include_usage=True, chunk_size=4))


def content_chunk(like: bytes, spelled: bytes) -> bytes:
    """A chunk of the same stream as `like` (a content chunk) holding the content as spelled here."""
    head, _, rest = like.partition(b'"delta":{"content":"')
    return head + b'"delta":{"content":"' + spelled + b'"}' + rest.split(b'"}', 1)[1]


# Chunks given after the third content chunk of a round (the lane open): one per message (the lane's), or the whole
# round in one message (the reader's).
ODD = {
    "an escaped quote": lambda c: [content_chunk(c, b'say \\"hi\\"')],
    "an escaped backslash last": lambda c: [content_chunk(c, b"a\\\\")],
    "escapes spelled otherwise": lambda c: [content_chunk(c, b"\\u00e9\\/\\ud83d\\ude00")],
    "CRLF line endings": lambda c: [content_chunk(c, b"crlf").replace(b"\n", b"\r\n")],
    "its content given twice": lambda c: [content_chunk(c, b"x").replace(b'"x"}', b'"x","content":"y"}')],
    "another choice": lambda c: [content_chunk(c, b"other").replace(b'"index":0', b'"index":1')],
    "another id": lambda c: [content_chunk(c, b"x").replace(b'"id":"chatcmpl-', b'"id":"chatcmpl-other-')],
    "its delta given twice": lambda c: [twice(c, b"p", b"p"), twice(c, b"q", b"p"), twice(c, b"r", b"p")],
    "a field of its own": lambda c: [content_chunk(c, b"x").replace(b'"}', b'","extra":1}', 1)],
    "two chunks in one message": lambda c: [content_chunk(c, b"x") + content_chunk(c, b"y")],
    # The lane's template is checked by reading it around a mark: content that is the mark, given twice (the first
    # one overridden) or nested before the choices, must not move the lane's string out of the choice's content.
    "the mark as content, its choices given twice": lambda c: [marked_twice(c, b"Zq"), marked_twice(c, b"EVIL")],
    "the mark as content, a delta nested before": lambda c: [nested(c, b"Zq"), nested(c, b"EVIL"), nested(c, b"X")],
    "the other mark as content, nested": lambda c: [content_chunk(c, b"Zq"), nested(c, b"Zr"), nested(c, b"EVIL")],
    # A line break in the string ends its line for the client's SSE parser: the chunk is not one event there.
    "a line break in its string": lambda c: [content_chunk(c, b"a\nb"), content_chunk(c, b"c\r")],
    "an end of the stream in its string": lambda c: [content_chunk(c, b"a\n\ndata: [DONE]\n\nb")],
    # An event in two `data:` lines: a later chunk like it without the second `data: ` is half a chunk to the client.
    "an event in two data lines": lambda c: [two_lines(c, b"a", b"data: "), two_lines(c, b"EVIL"), two_lines(c, b"X")],
    "a call in the chunk's message": lambda c: [
        content_chunk(c, b"x")
        + content_chunk(c, b"z").replace(
            b'"delta":{"content":"z"}',
            b'"delta":{"tool_calls":[{"index":0,"id":"call_s","type":"function","function":{"name":"lookup",'
            b'"arguments":"{\\"key\\":\\"smuggled\\"}"}}]}',
        )
    ],
}
UNREADABLE = {  # the lane's: its string read with the message, so it reached the client before the round failed
    "half a surrogate pair": lambda c: [content_chunk(c, b"\\ud83d")],
    "an escape JSON does not have": lambda c: [content_chunk(c, b"a\\x")],
    "bytes that are not UTF-8": lambda c: [content_chunk(c, b"\xff\xfe")],
    "a character cut between two chunks": lambda c: [content_chunk(c, b"\xe2\x82"), content_chunk(c, b"\xac")],
    "an escaped quote before the end's spelling": lambda c: [content_chunk(c, b"a\\"), content_chunk(c, b"b")],
    "a raw control character": lambda c: [content_chunk(c, b"a\tb")],
}


def marked_twice(like: bytes, spelled: bytes) -> bytes:
    """A content chunk spelling `spelled` whose choices are given again after it, with the content `Zq`: JSON's last
    key wins, so the SDK reads `Zq` whatever `spelled` is."""
    again = b',"choices":[{"index":0,"delta":{"content":"Zq"},"logprobs":null,"finish_reason":null}]}\n\n'
    return content_chunk(like, spelled)[: -len(b"}\n\n")] + again


def nested(like: bytes, spelled: bytes) -> bytes:
    """A content chunk `Zq` with a field of its own before its choices that holds `"delta":{"content":spelled}`, and
    no `usage` key (which a client that did not ask for usage does not get: a chunk written anew)."""
    chunk = content_chunk(like, b"Zq").replace(b'"usage":null,', b"")
    return chunk.replace(b'"model"', b'"x":{"delta":{"content":"' + spelled + b'"}},"model"', 1)


def two_lines(like: bytes, spelled: bytes, field: bytes = b"") -> bytes:
    """A content chunk whose JSON goes on in a second line after its id, begun with `field`."""
    return content_chunk(like, spelled).replace(b',"choices":', b",\n" + field + b'"choices":', 1)


def twice(like: bytes, first: bytes, second: bytes) -> bytes:
    """A content chunk whose choice gives its delta twice: JSON's last key wins, so the SDK reads the second."""
    return content_chunk(like, first).replace(b'"},', b'"},"delta":{"content":"' + second + b'"},', 1)


def rounds(odd: Any, at: str) -> list[list[bytes]]:
    call = [tool_call("lookup", {"key": "k"}, id="call_1")]
    if at == "later round":
        streams = [chunks("Let me check.", call), chunks("plain text here")]
    else:
        streams = [chunks("plain text here", call), chunks("done")]
    odd_round = streams[-1] if at == "later round" else streams[0]
    odd_round[4:4] = odd(odd_round[3])
    return streams


class Judge(CustomLogger):
    """Notes the content of every answer it judges."""

    agentic_loop_streaming = "live"

    def __init__(self) -> None:
        super().__init__()
        self.judged: list[Any] = []

    async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> tuple[bool, dict[str, Any]]:
        self.judged.append(response.choices[0].message.content)
        return False, {}


async def run(streams: list[list[bytes]], merged: bool) -> tuple[list[Any], Any, list[str], list[Any]]:
    """The client's chunks, the openai SDK's final completion (or what it raised), the tool calls run, and what the
    hooks judged: each answer's content, then the assistant messages the app got back in later rounds."""
    noted, ran = noted_lookup()
    judge = Judge()
    model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted]), judge])) as client:
        raw = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER, "stream": True})
    events = [event.data for event in SSEReader().feed(raw.content)]
    for request in model.requests[1:]:  # the history sent back holds the content the hooks' answer had
        history = request.body["messages"]
        judge.judged.append([m.get("content") for m in history if m.get("role") == "assistant"])
    model = ScriptedModel(*(event_stream([b"".join(s)] if merged else s) for s in streams))
    sdk = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([noted])]))
    try:
        async with sdk.chat.completions.stream(model="m", messages=USER) as stream:
            final: Any = (await stream.get_final_completion()).model_dump()
    except Exception as error:  # what the SDK raises: the same in both
        final = type(error).__name__
    return [_read(data) for data in events], final, ran, judge.judged


def _read(data: bytes) -> Any:
    """A chunk the client got, read; as its bytes where it is not JSON (one the lane passed on unread)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data


@pytest.mark.parametrize("odd", list(ODD))
@pytest.mark.parametrize("at", ["first round", "later round"])
async def test_an_odd_chunk_reaches_the_client_and_the_hooks_as_the_reader_reads_it(odd: str, at: str) -> None:
    """Whatever a chunk holds, the lane takes it as the reader does or leaves it to the reader: the client's chunks,
    the openai SDK's final completion and the tool calls run are the same when the round's chunks come one per
    message (the lane) and all in one message (the reader)."""
    streams = rounds(ODD[odd], at)
    assert await run(streams, merged=False) == await run(streams, merged=True)


@pytest.mark.parametrize("odd", list(UNREADABLE))
@pytest.mark.parametrize("at", ["first round", "later round"])
async def test_a_chunk_taken_unread_whose_string_is_not_json_ends_the_round_with_an_error_not_a_tool_call(
    odd: str, at: str
) -> None:
    """Content taken by the lane is read with the round's message: a string that is not JSON (or a character cut
    between two chunks, which the SDK reads each on its own) has reached the client as the app sent it, and then the
    round ends with the route's error chunk and its tool call never runs, as when the reader refuses it at once."""
    streams = rounds(UNREADABLE[odd], at)
    for merged in (False, True):
        events, final, ran, _ = await run(streams, merged)
        assert "error" in events[-1] and "could not be read" in events[-1]["error"]["message"]
        assert b"[DONE]" not in events
        assert final in ("APIError", "UnicodeDecodeError", "JSONDecodeError") or isinstance(final, str)
        if at == "first round":
            assert ran == []
        else:
            assert ran == ["k", "k"]  # the first round's call, once for each of the two requests


def test_every_content_chunk_after_the_first_takes_the_lane_and_a_later_round_gets_the_clients_id() -> None:
    """The lane is taken (a relay that never took it would pass the tests above too): after the first content chunk
    read, the others go out as the app's bytes; in a later round with the first round's id and `created`."""
    relay = CHAT.relay({"include_usage": True})
    assert relay is not None
    first, second = chunks("abcdefghijkl", [tool_call("lookup", {"key": "k"})]), chunks("mnopqrstuvwx")
    for number, events in enumerate((first, second)):
        relay.begin_round()
        reader = SSEReader()
        taken = []
        for event in events:
            out = relay.pass_on(event) if reader.between_events else None
            if out is None:
                [relay.feed(read) for read in reader.feed(event)]
            else:
                taken.append(out)
        content = [e for e in events if b'"delta":{"content":"' in e and b'"content":""' not in e]
        assert len(taken) == len(content) - (1 if number == 0 else 2)  # a later round's first one has the separator
        if number == 0:
            assert all(out is event for out, event in zip(taken, content[1:], strict=True))
        else:
            head = orjson.loads(first[0][6:])
            for out in taken:
                chunk = orjson.loads(out[6:])
                assert (chunk["id"], chunk["created"]) == (head["id"], head["created"])
    assert orjson.loads(orjson.dumps(relay.body()))["choices"][0]["message"]["content"] == "mnopqrstuvwx"


async def test_a_later_rounds_text_after_an_empty_content_chunk_is_set_off_from_the_earlier_text() -> None:
    """A later round's text is set off by a blank line from the earlier rounds' (the relay adds it to its first
    text): an empty content chunk before it does not open the lane, so the text after it gets the blank line too."""
    later = chunks("abcdefgh")
    later.insert(1, content_chunk(later[1], b""))
    streams = [chunks("Let me check.", [tool_call("lookup", {"key": "k"}, id="call_1")]), later]
    passed, read = await run(streams, merged=False), await run(streams, merged=True)
    assert passed == read
    assert passed[1]["choices"][0]["message"]["content"] == "Let me check.\n\nabcdefgh"


def lane_opened(events: list[bytes], include_usage: bool = True) -> tuple[ChatRelay, list[bytes]]:
    """A Chat relay that has read a round's first three chunks (the role's and two of content: its lane open)."""
    relay = CHAT.relay({"include_usage": include_usage})
    assert isinstance(relay, ChatRelay)
    relay.begin_round()
    reader = SSEReader()
    for event in events[:3]:
        [relay.feed(read) for read in reader.feed(event)]
    return relay, events


def test_a_chunk_whose_string_ends_in_a_backslash_is_left_to_the_reader() -> None:
    """A backslash before the quote that would close the string escapes it: the string goes on, so the chunk is not
    the one shape, and the reader reads it (here: not JSON, which fails the round at once)."""
    relay, events = lane_opened(chunks("abcdefghijkl"))
    assert relay.pass_on(events[3]) is events[3]  # the lane is open
    assert relay.pass_on(content_chunk(events[3], b"a\\")) is None


def test_a_chunk_whose_string_holds_escaped_quotes_and_backslashes_is_taken_unread_as_spelled() -> None:
    """The first quote its backslashes leave unescaped closes the string: escaped quotes, and an escaped backslash
    last, leave the chunk in the one shape, and the lane keeps the string as it is spelled (read with the message)."""
    relay, events = lane_opened(chunks("abcdefghijkl"))
    before = bytes(relay.lane_text)
    spelled = [rb"say \"hi\" \/", rb"a\\", rb"\"\u0041"]
    for piece in spelled:
        chunk = content_chunk(events[3], piece)
        assert relay.pass_on(chunk) is chunk
    assert bytes(relay.lane_text) == before + b"".join(piece + b'","' for piece in spelled)


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_lane_opened_by_a_padded_chunk_takes_chunks_with_padding_of_their_own_and_nothing_else(
    include_usage: bool,
) -> None:
    """OpenAI's default chunks end in `obfuscation` padding that differs in each: a lane opened by such a chunk takes
    the next ones, each passed on with its own padding, and leaves to the reader a chunk whose padding is not
    letters and digits, is missing, or is followed by anything."""
    relay, events = lane_opened(padded(chunks("abcdefghijkl")), include_usage)
    like = events[3]
    own = like[: like.rindex(b'"obfuscation":"')] + b'"obfuscation":"Q1w2E3r4T5y6"}\n\n'
    out = relay.pass_on(own)
    assert out is not None and out.endswith(b'"obfuscation":"Q1w2E3r4T5y6"}\n\n')  # its own padding, last
    expected = {key: value for key, value in orjson.loads(own[6:]).items() if include_usage or key != "usage"}
    assert orjson.loads(out[6:]) == expected and (out is own) == include_usage
    stem = like[: like.rindex(b'"obfuscation":"')]
    for odd in (
        stem + b'"obfuscation":"a-b"}\n\n',  # not letters and digits
        stem + b'"obfuscation":"\xc3\xa9"}\n\n',  # not ASCII
        stem + b'"obfuscation":""}\n\n',  # empty
        stem[:-1] + b"}\n\n",  # none
        stem + b'"obfuscation":"ab","choices":[]}\n\n',  # a key after it
        stem + b'"obfuscation":"ab"}\n\ndata: [DONE]\n\n',  # another event after it
    ):
        assert relay.pass_on(odd) is None, odd
