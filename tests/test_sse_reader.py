"""The incremental SSE reader: the event-stream rules, whatever the chunk boundaries."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from agentic_middleware.sse_reader import ServerSentEvent, SSEReader


def read(*chunks: bytes) -> list[ServerSentEvent]:
    reader = SSEReader()
    return [event for chunk in chunks for event in reader.feed(chunk)]


def test_line_endings_lf_crlf_and_cr_give_the_same_events() -> None:
    lf = b"event: a\ndata: 1\n\ndata: 2\n\n"
    expected = [ServerSentEvent("a", b"1"), ServerSentEvent("", b"2")]
    assert read(lf) == expected
    assert read(lf.replace(b"\n", b"\r\n")) == expected
    assert read(lf.replace(b"\n", b"\r")) == expected


def test_a_crlf_cut_between_its_cr_and_lf_ends_one_line() -> None:
    assert read(b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n") == [ServerSentEvent("", b"x"), ServerSentEvent("", b"y")]
    assert read(b"data: x\r", b"", b"\n\r\n") == [ServerSentEvent("", b"x")]


def test_comments_are_dropped_and_multi_line_data_is_joined() -> None:
    stream = b": keep-alive\n\nevent: e\n: note\ndata: one\ndata:two\ndata\n\n"
    assert read(stream) == [ServerSentEvent("e", b"one\ntwo\n")]


def test_events_without_data_are_not_dispatched_and_reset_the_type() -> None:
    assert read(b"event: ping\n\ndata: x\n\n") == [ServerSentEvent("", b"x")]


def test_unknown_fields_id_retry_and_a_byte_order_mark_are_ignored() -> None:
    stream = b"\xef\xbb\xbfid: 7\nretry: 10\nfoo: bar\ndata: x\n\n"
    assert read(stream) == [ServerSentEvent("", b"x")]


def test_several_events_in_one_chunk_and_one_event_over_many() -> None:
    stream = b"event: a\ndata: 1\n\nevent: b\ndata: 2\n\nevent: c\ndata: 3\n\n"
    assert read(stream) == [ServerSentEvent("a", b"1"), ServerSentEvent("b", b"2"), ServerSentEvent("c", b"3")]
    assert read(*(stream[i : i + 1] for i in range(len(stream)))) == read(stream)


def test_an_unfinished_event_is_not_dispatched() -> None:
    assert read(b"data: 1\n\ndata: 2\n") == [ServerSentEvent("", b"1")]


def test_encode_writes_what_reads_back() -> None:
    event = ServerSentEvent("content_block_delta", b'{"a":1}\n{"b":2}')
    assert event.encode() == b'event: content_block_delta\ndata: {"a":1}\ndata: {"b":2}\n\n'
    assert read(event.encode()) == [event]
    assert ServerSentEvent("", b"[DONE]").encode() == b"data: [DONE]\n\n"


names = st.sampled_from(["", "message_start", "content_block_delta", "ping", "é"])
payloads = st.lists(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20), min_size=1, max_size=3
)


@given(
    events=st.lists(st.tuples(names, payloads), min_size=1, max_size=8),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_chunking_of_any_stream_gives_its_events(
    events: list[tuple[str, list[str]]], ending: bytes, comments: bool, cuts: list[int]
) -> None:
    stream = b""
    for name, lines in events:
        if comments:
            stream += b": comment" + ending
        if name:
            stream += b"event: " + name.encode() + ending
        stream += b"".join(b"data: " + line.encode() + ending for line in lines) + ending
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    expected = [ServerSentEvent(name, "\n".join(lines).encode()) for name, lines in events]
    assert read(*chunks) == expected
