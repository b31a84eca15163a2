"""An Anthropic Messages stream relayed live across rounds, as one stream to the client (`MessagesRelay`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .. import sse
from ..native import NativeCall, NativeRun
from ..native.messages import cited, pair, server_id, server_tool_use
from ..payload import UNREAD
from ..sse_reader import ServerSentEvent, whole_event
from . import AppStreamError, Spelled, StreamMismatch, StreamRelay
from .messages_lane import BARE, NAMED, STRING_TO_THE_END, input_lane, lane

_NOTHING: tuple[bytes, ...] = ()
_STREAMED = frozenset(("text", "thinking"))  # the blocks whose deltas are read when the block ends
_TAKES_INPUT = frozenset(("tool_use", "server_tool_use", "mcp_tool_use"))  # the blocks the SDKs add tool input to


class MessagesRelay(StreamRelay):
    """A Messages stream across rounds: the first `message_start`, blocks renumbered to follow the earlier
    rounds' blocks, and one `message_delta` and `message_stop` at the very end.

    Within a round, everything from the first `tool_use` block on is held: tool calls come last, and
    holding the rest keeps the client's blocks in the app's order. Native records go out between rounds,
    and the text after them gets `citations_delta`s of their results before its `content_block_stop`.
    """

    __slots__ = (
        *("started", "base", "sent", "recorded", "records", "announced", "holding", "held", "message", "blocks"),
        *("pieces", "stopped", "lane", "lane_size", "lane_index", "lane_text", "lane_moved"),
    )

    def __init__(self) -> None:
        self.started = False  # the client has a `message_start`
        self.base = 0  # the client's index of this round's first block
        self.sent = 0  # blocks of this round that went out
        self.recorded = 0  # native record blocks that went out after them
        # Every native call recorded so far, with its block id. This and `held` are tuples until they hold something:
        # an empty list is an object the collector tracks, and a relay lasts as long as its stream (most record none).
        self.records: tuple[tuple[NativeRun, str], ...] = ()
        self.announced: dict[int, str] = {}  # the block ids of calls announced and not recorded yet, by call
        self.begin_round()

    def begin_round(self) -> None:
        self.base += self.sent + self.recorded
        self.sent = self.recorded = 0
        self.holding = False
        self.held: list[bytes] | tuple[()] = ()
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.pieces: dict[tuple[int, str], Spelled] = {}  # streamed strings, joined when their block stops
        self.stopped = False
        self.lane: bytes | None = (
            None  # the start of the open block's deltas `pass_on` takes unread (`messages_lane.lane`)
        )
        self.lane_size = 0
        self.lane_index = -1
        self.lane_text = Spelled()  # the open block's streamed string
        self.lane_moved = b""  # the same start for the client, with the index moved after the earlier rounds' blocks

    def open_lane(self, index: int, kind: Any) -> None:
        """A block started: a text or thinking block's deltas in the one shape are taken unread until it stops, and so
        are a call's `input_json_delta`s (held with the rest of the round from a `tool_use` block on: `pass_on`)."""
        if type(index) is not int:
            self.close_lane()
            return
        if kind in _STREAMED and not self.holding:
            self.lane, self.lane_moved = lane(index, kind), lane(index + self.base, kind)
            self.lane_text = self.pieces[index, kind] = Spelled()  # a block starts once (`feed` refuses a second start)
        elif kind in _TAKES_INPUT:
            # Joined at the round's end as the reader's pieces are (`body`), with any delta the reader takes after.
            self.lane, self.lane_moved = input_lane(index), input_lane(index + self.base)
            self.lane_text = self.pieces[index, "input"] = Spelled()
        else:
            self.close_lane()
            return
        self.lane_size = len(self.lane)
        self.lane_index = index

    def close_lane(self) -> None:
        self.lane, self.lane_size = None, 0  # `chunk[:0] == None` is false: `pass_on` takes nothing
        self.lane_text = Spelled()  # the block's own is joined into it: not held twice

    def pass_on(self, chunk: bytes) -> bytes | None:
        """A whole event without the SSE reader: the bytes are checked for the one form that allows it (the Anthropic
        API's own, which the reader would pass on as it came). Empty: taken, and nothing goes out now (held, dropped).

        A text or thinking delta of the open block (`open_lane`), or a call's `input_json_delta`, is taken unread: its
        string, as it is spelled, is added to the block's (`Spelled`), to be read when the block ends (a call's input
        when the round does, as JSON: `joined`), as the client's SDK reads each. It needs no
        unescaped quote within its string (no second key, no second event) and no line end or other control character
        in it (a line end would cut the client's event): `SPELLED_STRING`, then the event's end. In the first round it
        goes out as it came; in a later one by its start spelled anew, its index moved after the earlier rounds'
        blocks (`lane_moved`); while the round is held (a call's input: from its first `tool_use` block on), those bytes
        are held with the rest, as `out` holds the reader's.

        Any other event of a known name (`NAMED`) in a chunk of its own, with one `data` line, LF line ends and its
        JSON `type` its name, is parsed once and taken as `feed` takes it (`took`): the same bytes out, the same
        errors (an `error` event fails the round). Anything else (comments, `id` lines, CR, several or cut events, a
        `type` other than the name) is the reader's: None. A later round's index is moved in the event written anew,
        never in bytes not checked (the client would read another block than the hooks' answer has when the index is
        given twice: JSON's last key wins, however it is spelled)."""
        # A slice compared costs less than `startswith`, which parses its arguments; one `re` match checks the rest.
        size = self.lane_size
        if chunk[:size] == self.lane and STRING_TO_THE_END(chunk, size) is not None:
            text = self.lane_text
            text += chunk[size:-5]  # as `Spelled` keeps it
            text += b'","'
            passed = self.lane_moved + chunk[size:] if self.base else chunk
            if self.holding:  # only a call's lane is open then: its block started the holding, or came after it
                self.held.append(passed)  # type: ignore[union-attr]  # a list: `out` held the block's start
                return b""
            return passed
        bare = BARE.get(chunk)
        if bare is not None:  # in the API's own bytes: taken as the parse below would take it
            out = self.took(bare["type"], dict(bare), chunk)  # a copy: `out` moves a later round's index in it
            return out[0] if len(out) == 1 else b"".join(out)
        # One whole event of a known name in the one form the SSE reader passes on as it came: `feed`'s work done.
        read = whole_event(chunk, NAMED)
        if read is None:
            return None
        name, data = read
        payload = orjson.loads(data)  # not JSON: the stream cannot be read, as in `feed`
        if type(payload) is not dict or payload.get("type") != name:
            return None  # another event under this one's name (JSON's last key wins), or no object: `feed` reads it
        out = self.took(name, payload, chunk)
        return out[0] if len(out) == 1 else b"".join(out)  # empty: held or dropped

    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        payload = orjson.loads(event.data)
        return self.took(payload.get("type") or event.event, payload, event)

    def took(self, kind: str, payload: dict[str, Any], event: ServerSentEvent | bytes) -> Sequence[bytes]:
        """What `feed` does with an event of type `kind`, read into `payload`: the one implementation of both `feed`
        and `pass_on`'s whole events. `event` is the reader's event, or the chunk `pass_on` read, which is one whole
        event named `kind` in the form the reader passes on as it came (its `raw`)."""
        if kind == "content_block_delta":
            self.delta(payload)
            return self.out(event, kind, payload)
        if kind == "content_block_start":
            index = payload["index"]
            if self.message is None or type(index) is not int or index != len(self.blocks):
                # The client's SDK places a block by the order blocks start, in the message `message_start` began, and
                # adds a delta to the block at its `index` in that list: a block started out of that place would leave
                # the hooks another message than the client's.
                raise ValueError(f"content_block_start for block {index!r} where block {len(self.blocks)} starts")
            block = self.blocks[index] = dict(payload["content_block"])
            if block.get("type") == "tool_use":
                self.holding = True
            if not self.holding:
                self.sent += 1
            self.open_lane(index, block.get("type"))
            return self.out(event, kind, payload)
        if kind == "content_block_stop":
            index = payload["index"]
            block = self.blocks[index]
            if index == self.lane_index:
                self.close_lane()
            self.joined(index, "text")  # a call's input is read at the round's end (`body`), with any delta after this
            self.joined(index, "thinking")
            if self.records and block.get("type") == "text" and isinstance(block.get("text"), str):
                return self.cite(index, block["text"], self.out(event, kind, payload))
            return self.out(event, kind, payload)
        if kind == "message_start":
            self.message = dict(payload["message"])
            if self.started:
                return _NOTHING
            self.started = True
            return (_as_sent(event, kind, payload),)
        if kind == "message_delta":
            assert self.message is not None, "message_delta before message_start"
            self.message.update(payload.get("delta") or {})
            usage = payload.get("usage") or {}
            self.message["usage"] = {
                **(self.message.get("usage") or {}),
                **{key: value for key, value in usage.items() if value is not None},
            }
            return _NOTHING
        if kind == "message_stop":
            self.stopped = True
            return _NOTHING
        if kind == "error":
            raise AppStreamError(_data(event) if isinstance(event, bytes) else event.data)
        if kind == "ping":
            return _NOTHING  # the live stream sends its own keep-alives
        return self.out(event, kind, payload)  # an event type this version does not know: as it came

    def delta(self, payload: dict[str, Any]) -> None:
        """Add a `content_block_delta` to its block, as the SDKs add it: each kind only to the blocks that take it
        (a text delta to a text block...), any other left out, as the client's message leaves it."""
        index = payload["index"]
        delta = payload["delta"]
        block = self.blocks[index]
        kind = block.get("type")
        match delta.get("type"):
            case "text_delta":
                if kind == "text":
                    self.piece(index, "text", delta["text"])
            case "input_json_delta":
                if kind in _TAKES_INPUT:
                    self.piece(index, "input", delta["partial_json"])
            case "thinking_delta":
                if kind == "thinking":
                    self.piece(index, "thinking", delta["thinking"])
            case "signature_delta":
                if kind == "thinking":
                    block["signature"] = delta["signature"]
            case "citations_delta":
                if kind == "text":
                    block.setdefault("citations", []).append(delta["citation"])
            case _:
                _merge(block, {key: value for key, value in delta.items() if key != "type"})

    def piece(self, index: int, name: str, text: str) -> None:
        if type(text) is not str:  # before the delta goes out: the SDKs add it to a string, and would fail on it
            raise TypeError(f"a delta's {name} is {type(text).__name__}, not a string")
        pieces = self.pieces.get((index, name))
        if pieces is None:
            pieces = self.pieces[index, name] = Spelled()
        pieces.add(text)

    def out(self, event: ServerSentEvent | bytes, kind: str, payload: dict[str, Any]) -> Sequence[bytes]:
        if self.base and "index" in payload:
            payload["index"] += self.base
            client = sse.named_event(kind, payload)
        else:
            client = _as_sent(event, kind, payload)
        if self.holding:
            if self.held:
                self.held.append(client)
            else:
                self.held = [client]
            return _NOTHING
        return (client,)

    def cite(self, index: int, text: str, stop: Sequence[bytes]) -> Sequence[bytes]:
        """A text block's stop, after a `citations_delta` for each result of the records so far that it names: the
        citations the final answer of the JSON path has (the round's own answer, which hooks judge, has none)."""
        at = index + self.base
        deltas = [
            sse.named_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": at, "delta": {"type": "citations_delta", "citation": c}},
            )
            for c in cited(text, self.records)
        ]
        if not deltas:
            return stop
        if self.holding:
            self.held = [*self.held[:-1], *deltas, *self.held[-1:]]  # in front of the held stop
            return _NOTHING
        return [*deltas, *stop]

    def announce(self, search: NativeCall, round: int) -> Sequence[bytes] | None:
        """The call's `server_tool_use` block, after what the client has."""
        if not self.started:
            return None
        block_id = self.announced[id(search.call)] = server_id(search.call.get("id"))
        return self.blocks_out([server_tool_use(search, block_id)])

    def record(self, run: NativeRun, round: int) -> Sequence[bytes] | None:
        """The call's `web_search_tool_result` block (with its `server_tool_use` if it was not announced)."""
        if not self.started:
            return None
        block_id = self.announced.pop(id(run.call), None)
        if block_id is None:
            block_id = server_id(run.call.get("id"))
            blocks = pair(run, block_id)
        else:
            blocks = pair(run, block_id)[1:]
        self.records += ((run, block_id),)
        return self.blocks_out(blocks)

    def blocks_out(self, blocks: list[dict[str, Any]]) -> list[bytes]:
        """Whole blocks written between two rounds, numbered after what the client has."""
        events: list[bytes] = []
        for block in blocks:
            events += sse.messages_block(self.base + self.sent + self.recorded, block)
            self.recorded += 1
        return events

    def body(self) -> dict[str, Any] | None:
        # Ended by `message_stop`, or by the `message_delta` that gives the stop reason: nothing comes after it but
        # the empty `message_stop`, which the anthropic SDK does not wait for (a stream whose last event lacks the
        # blank line that dispatches it, as the HTML standard reads it, ends so).
        if self.message is None or not (self.stopped or self.message.get("stop_reason") is not None):
            return None
        # Calls' input, and what no `content_block_stop` joined (a block the stream never stopped, a delta after its
        # block's stop or after the round's end), are in the blocks too: the client's SDK adds every delta to its block.
        for index, name in list(self.pieces):
            self.joined(index, name)
        # In index order as they are: a block starts only at the next index (`took`).
        return {**self.message, "content": list(self.blocks.values())}

    def joined(self, index: int, name: str) -> None:
        """A block's streamed string, joined into the block (`input` read as JSON): text and thinking once their block
        stops, then what comes after; a call's input at the round's end."""
        pieces = self.pieces.pop((index, name), None)
        if pieces is None:
            return
        block = self.blocks[index]
        if name != "input":
            block[name] = block.get(name, "") + str(pieces)
        elif text := str(pieces):
            block["input"] = _tool_input(text)

    def finish(
        self, final: Mapping[str, Any], fresh: bool = False, built: Mapping[str, Any] | None = None
    ) -> list[bytes]:
        events: list[bytes] = []
        if not self.started:
            events.append(sse.messages_start(final))
            self.started = True
        content = final.get("content")
        content = content if isinstance(content, list) else []
        answer = None if fresh else self.body() if built is None else built
        if answer is not None and content == answer["content"]:
            events += self.held
        else:
            sent = [] if fresh else [self.blocks[index] for index in range(self.sent)]
            more: list[Any] = []
            if content[: len(sent)] != sent:
                rest = _text_rest(sent[-1], content[len(sent) - 1]) if content[: len(sent) - 1] == sent[:-1] else None
                if rest is None:
                    raise StreamMismatch("the answer's content differs from the blocks already streamed")
                more = [{"type": "text", "text": rest}]  # the last text block, extended: the rest is a block of its own
            first = self.base + self.sent
            for position, block in enumerate([*more, *content[len(sent) :]]):
                events += sse.messages_block(first + position, block)
        events += sse.messages_end(final)
        return events


def _as_sent(event: ServerSentEvent | bytes, kind: str, payload: dict[str, Any]) -> bytes:
    """The client's bytes of an event that goes out unchanged: as it came when it is named by its type (`pass_on`'s
    chunk always is), else written anew under its type."""
    if isinstance(event, bytes):
        return event
    return event.encode() if event.event == kind else sse.named_event(kind, payload)


def _data(chunk: bytes) -> bytes:
    """The data of one whole event in the form `pass_on` reads: its one `data` line's value."""
    return chunk[chunk.index(b"\ndata: ") + 7 : -2]


def _text_rest(sent: Any, final: Any) -> str | None:
    """What `final` adds to the text block `sent` when it is that block with more text at its end; else None."""
    if not (isinstance(sent, dict) and isinstance(final, dict) and sent.get("type") == final.get("type") == "text"):
        return None
    old, new = sent.get("text"), final.get("text")
    if not (isinstance(old, str) and isinstance(new, str) and new.startswith(old)):
        return None
    same = {**final, "text": old} == sent
    return new[len(old) :] if same else None


def _tool_input(text: str) -> Any:
    """A streamed call's input: the JSON its `input_json_delta`s join into, else `{"_raw": text}`.

    A model may stream input that is not JSON (cut short, say). The client's SDK accumulates such a stream without
    error, so it is no reason to end the stream: a call the client runs reaches it as the app sent it. Hooks get the
    text as LiteLLM's own streaming loop gives it to them, in an object under `_raw` (so `input.get(...)` works), and
    a claimed call's tool is not run on it: the model reads an error result quoting the text (as with a chat or
    Responses call whose `arguments` are not JSON).
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {UNREAD: text}


def _merge(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """A delta of a kind this version does not know: strings are appended, anything else replaces."""
    for key, value in delta.items():
        old = target.get(key)
        target[key] = old + value if isinstance(old, str) and isinstance(value, str) else value
