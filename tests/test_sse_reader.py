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


def test_a_byte_order_mark_cut_across_chunks_is_dropped_once_and_only_at_the_start() -> None:
    assert read(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [ServerSentEvent("", b"x")]
    assert read(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []  # a second mark is part of the field's name
    assert read(b"\xef", b"data: x\n\n") == []  # not a mark: the first field's name is "\xefdata"
    assert read(b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\n") == [ServerSentEvent("", b"a")]


def test_a_fields_value_loses_one_leading_space_and_a_field_without_colon_is_empty() -> None:
    stream = b"data:x\ndata: y\ndata:  z\ndata\ndata:\n\n"
    assert read(stream) == [ServerSentEvent("", b"x\ny\n z\n\n")]
    assert read(b"event:e\ndata:1\n\n") == [ServerSentEvent("e", b"1")]
    assert read(b"data: a:b: c\n\n") == [ServerSentEvent("", b"a:b: c")]


def test_a_crlf_after_an_event_that_ends_a_chunk_in_cr_ends_nothing_more() -> None:
    assert read(b"data: x\r\n\r", b"\ndata: y\r", b"\n\r", b"\n") == [
        ServerSentEvent("", b"x"),
        ServerSentEvent("", b"y"),
    ]
    assert read(b"data: x\r", b"\r") == [ServerSentEvent("", b"x")]  # CR CR: two line ends


def feed_all(size: int, piece: int) -> tuple[list[ServerSentEvent], int]:
    """One event of `size` bytes of data in pieces of `piece` bytes: its events and the reader's work."""
    stream = b"event: big\ndata: " + b"x" * size + b"\n\n"
    reader = SSEReader()
    events = [event for start in range(0, len(stream), piece) for event in reader.feed(stream[start : start + piece])]
    return events, reader.scanned


def test_the_work_is_about_one_pass_over_the_bytes_however_they_are_cut() -> None:
    size = 1 << 20
    for piece in (1, 1024, 16 * 1024, 1 << 21):
        events, scanned = feed_all(size, piece)
        assert events == [ServerSentEvent("big", b"x" * size)]
        assert scanned <= 2 * size + 64, (piece, scanned)  # read once, joined once: not once per chunk


@given(sizes=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=60), cr=st.booleans())
def test_the_work_is_linear_for_any_chunking(sizes: list[int], cr: bool) -> None:
    ending = b"\r\n" if cr else b"\n"
    stream = b"".join(b"data: " + b"y" * size + ending + ending for size in sizes) * 3
    reader = SSEReader()
    events = []
    for start in range(0, len(stream), 7):
        events += reader.feed(stream[start : start + 7])
    assert [len(event.data) for event in events] == sizes * 3
    assert reader.scanned <= 2 * len(stream)
