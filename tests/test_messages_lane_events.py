"""The Messages relay's lane for whole events (`MessagesRelay.pass_on`): an event of a known name in a chunk of its
own, in the Anthropic API's form, is read without the SSE reader and taken as `feed` takes it. Through the middleware
in front of a scripted streaming app, the client's bytes and the answers the hooks judge are the same whether a round's
events come one per chunk (the lane) or cut, with CRLF, comments or `id` lines (the reader)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from conftest import http_client
from litellm.integrations.custom_logger import CustomLogger
from streams import cut, event_stream
from test_relays import noted_lookup

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.sse_reader import SSEReader
from agentic_middleware.testing import ScriptedModel, message, tool_use

BOM = b"\xef\xbb\xbf"
USAGE = {"input_tokens": 3, "output_tokens": 4}
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
ERROR = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy now"}}\n\n'


def calling(text: str) -> list[bytes]:
    """A round that says `text`, then calls `lookup` (a server tool): a ping after its start."""
    body = message(text, tool_use("lookup", {"key": "k"}, "toolu_1"), usage=USAGE)
    events = list(sse.messages_events(body, chunk_size=5))
    events.insert(1, PING)
    return events


def saying(text: str) -> list[bytes]:
    """A round that says `text` and ends the turn: a ping after its start and one amid its deltas."""
    events = list(sse.messages_events(message(text, usage=USAGE), chunk_size=5))
    events.insert(1, PING)
    events.insert(4, PING)
    return events


def erring(text: str) -> list[bytes]:
    """A round that says part of `text`, then fails with the app's error event; events after it are never read."""
    events = saying(text)
    return [*events[:5], ERROR, *events[5:]]


def named(name: str, data: bytes) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), data)


def odd(events: list[bytes]) -> list[bytes]:
    """A round of `saying` with odd events added: data whose `type` differs from its event's name (the data's wins,
    as in `feed`) and JSON that gives a key twice (the last wins, as orjson reads it)."""
    start, ping, block, first, ping2, *deltas, stop, delta, end = events
    return [
        start,
        ping,
        block.replace(b'"index":0', b'"index":7,"index":0'),
        first,
        named("ping", b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" (a ping)"}}'),
        named("content_block_delta", b'{"type":"ping"}'),
        named(
            "content_block_delta",
            b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"first"},'
            b'"delta":{"type":"text_delta","text":" second"}}',
        ),
        ping2,
        *deltas,
        stop.replace(b'"index":0', b'"index":3,"index":0'),
        delta.replace(b'"stop_reason":"end_turn"', b'"stop_reason":"max_tokens","stop_reason":"end_turn"'),
        named("message_stop", b'{"type":"message_stop","type":"message_stop"}'),
        end,
    ]


def with_cr(events: list[bytes]) -> list[bytes]:
    """A round whose `message_delta` has a CR within its data line: JSON would read it as a space, but the reader
    ends the line there (the rest is a field it does not know), and so the round cannot be read."""
    return [event.replace(b'"type":"message_delta",', b'"type":"message_delta",\r') for event in events]


SCENARIOS: dict[str, list[list[bytes]]] = {
    "a tool round, then text": [calling("Let me check."), saying("It is forty two.")],
    "an error in the first round": [erring("Let me check this.")],
    "an error in a later round": [calling("Let me check."), erring("It is forty two.")],
    "a CR within a later round's data": [calling("Let me check."), with_cr(saying("It is forty two."))],
    "odd events in both rounds": [
        [*odd(saying("Let me check."))[:-4], *calling("x")[4:]],  # its text block, then the call's
        odd(saying("It is forty two.")),
    ],
}


def whole(events: list[bytes]) -> list[bytes]:
    return events


CHUNKINGS: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    # The lane's: each event in a chunk of its own (after a byte order mark apart, which the reader takes out).
    "whole events": whole,
    "a byte order mark apart first": lambda events: [BOM, *events],
    # The reader's.
    "a byte order mark with the first event": lambda events: [BOM + events[0], *events[1:]],
    "a byte order mark cut in two": lambda events: [BOM[:1], BOM[1:] + events[0], *events[1:]],
    "cut every 7 bytes": lambda events: cut(b"".join(events), range(7, len(b"".join(events)), 7)),
    "CRLF line ends": lambda events: [event.replace(b"\n", b"\r\n") for event in events],
    "a comment before each": lambda events: [b": note\n" + event for event in events],
    "id and retry lines": lambda events: [b"id: 7\nretry: 100\n" + event for event in events],
    "all in one chunk": lambda events: [b"".join(events)],
}
LANES = ("whole events", "a byte order mark apart first")


class Judged(CustomLogger):
    """Notes the answer of every round the hooks judge, and claims nothing."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def async_should_run_agentic_loop(self, response: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        self.answers.append(orjson.loads(orjson.dumps(response)))
        return False, {}


async def served(rounds: list[list[bytes]], chunking: str) -> tuple[int, bytes, list[Any], list[str]]:
    """One streaming request through the middleware (`lookup` a server tool) to an app that streams `rounds`, each
    cut by `chunking`: the status, the client's bytes, the answers judged and the conversations the app was sent
    (a rerun's holds the turn judged before it), the keys `lookup` ran for."""
    noted, ran = noted_lookup()
    judged = Judged()
    model = ScriptedModel(*(event_stream(CHUNKINGS[chunking](events)) for events in rounds))
    app = AgenticLoopMiddleware(model, hooks=[judged, ServerTools([noted])])
    body = {"model": "m", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with http_client(app) as client:
        response = await client.post("/v1/messages", json=body)
    sent = [request.body["messages"] for request in model.requests]  # the rerun's: the judged turn too
    return response.status_code, response.content, [*judged.answers, *sent], ran


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_whole_events_on_the_lane_give_the_client_and_the_hooks_what_the_reader_gives(scenario: str) -> None:
    """Every chunking of the same rounds gives the same status, client bytes, judged answers and tool runs: those of
    the lane (whole events) are those of the reader (cut, CRLF, comments, `id` lines, one chunk)."""
    rounds = SCENARIOS[scenario]
    got = {chunking: await served(rounds, chunking) for chunking in CHUNKINGS}
    lane = got["whole events"]
    for chunking, result in got.items():
        assert result == lane, chunking
    status, raw, answers, ran = lane
    events = [(event.event, orjson.loads(event.data)) for event in SSEReader().feed(raw)]
    assert status == 200
    assert [name for name, _ in events].count("message_start") == 1  # the later round's own was dropped
    assert "ping" not in [name for name, _ in events]  # the app's pings are not the client's
    if "error" in scenario or "CR" in scenario:
        assert events[-1][0] == "error"
        assert len(answers) == 2 * len(rounds) - 1  # the round that failed is never judged
        message = events[-1][1]["error"]["message"]
        assert "busy now" in message if "error" in scenario else "could not be read" in message
    else:
        assert len(answers) == 2 * len(rounds) and events[-1][0] == "message_stop"
    if len(rounds) > 1:
        assert ran == ["k"]
        # The later round's blocks follow the first's on the client: its text block's index moved after them.
        starts = [payload["index"] for name, payload in events if name == "content_block_start"]
        assert starts == list(range(len(starts))) and len(starts) >= 2
    if scenario == "odd events in both rounds":
        texts = [block["text"] for answer in answers[:2] for block in answer["content"] if block["type"] == "text"]
        assert texts == ["Let m (a ping) seconde check.", "It is (a ping) second forty two."]
        assert [answer["stop_reason"] for answer in answers[:2]] == ["tool_use", "end_turn"]


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
async def test_only_events_in_the_api_own_form_skip_the_reader(chunking: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane is taken: a stream whose events come whole, one per chunk, is never read by the SSE reader (every
    event, not only the text deltas); any other chunking is read by it."""
    read: list[bytes] = []
    feed = SSEReader.feed

    def noted(reader: SSEReader, chunk: bytes) -> Any:
        read.append(chunk)
        return feed(reader, chunk)

    monkeypatch.setattr(SSEReader, "feed", noted)
    await served(SCENARIOS["a tool round, then text"], chunking)
    if chunking == "whole events":
        assert read == []
    elif chunking == "a byte order mark apart first":
        assert read == [BOM, BOM]  # each round's mark is the reader's; every event after it the lane's
    else:
        assert read
