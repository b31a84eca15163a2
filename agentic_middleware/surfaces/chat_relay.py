"""A Chat Completions stream relayed live across rounds, as one stream to the client (`ChatRelay`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .. import sse
from ..sse_reader import ServerSentEvent
from . import PADDED_END, SPELLED_STRING, AppStreamError, Pieces, Spelled, StreamMismatch, StreamRelay

_NOTHING: tuple[bytes, ...] = ()
_TOP_FIELDS = ("system_fingerprint", "service_tier")
_SET_FIELDS = frozenset({"role", "id", "type", "name", "index"})  # repeated whole, never appended to
_SEPARATOR = "\n\n"  # between the text of two rounds, which a chat client reads as one string
_CONTENT = b'"delta":{"content":'
_MARKS = ("Zq", "Zr")  # the strings a chunk's template is read with (`ChatRelay.open_lane`): one not its content
_STRING = re.compile(SPELLED_STRING).match  # a content string taken unread: no line break, that would end its line
_PADDING = b',"obfuscation":"'  # OpenAI's, last in each chunk by default: letters and digits, other in every chunk


class ChatRelay(StreamRelay):
    """A Chat Completions stream across rounds: one `id` and `created`, the role sent once per choice, the
    text of later rounds set off from earlier text by a blank line, and one finish, usage and `[DONE]`.

    Within a round, everything from the first tool call delta or `finish_reason` on is held; the usage
    chunk (asked of the app for summing) is read, and reaches the client only if it asked for usage.
    """

    __slots__ = (  # thousands of streams each hold one
        *("include_usage", "head", "opened", "before", "sent", "separated", "holding", "held", "top", "choices"),
        *("calls", "usage", "lane_text", "lane", "lane_size", "lane_end", "lane_padded", "lane_client"),
    )

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.head: tuple[Any, Any] | None = None  # the client's `id` and `created`
        self.opened: set[int] = set()  # choices whose role went out
        # Choices with text from earlier rounds: the length of that text in the client's content, separators included.
        self.before: dict[int, int] = {}
        self.sent: dict[int, dict[str, Any]] = {}
        self.holding = False
        self.choices: dict[int, dict[str, Any]] = {}
        self.begin_round()

    def begin_round(self) -> None:
        for index, message in self.sent_messages().items():
            text = message.get("content")
            if isinstance(text, str) and text:
                self.before[index] = self.offset(index) + len(text)
        self.sent = {}  # the messages as they stood when holding began: what the client has of this round
        self.separated: set[int] = set()
        self.holding = False
        self.held: list[bytes] = []
        self.top: dict[str, Any] | None = None
        self.choices = {}
        self.calls: dict[int, dict[int, dict[str, Any]]] = {}
        self.usage: Any = None
        self.lane_text = Spelled()  # the content the lane adds to: a choice's (`open_lane`), this round's
        self.close_lane()

    def close_lane(self) -> None:
        self.lane: bytes | None = None  # a content chunk's bytes up to its string's opening quote (`open_lane`)
        self.lane_size = 0  # their length
        self.lane_end = b""  # and from its closing quote on (to the padding's value, when `lane_padded`)
        self.lane_padded = False  # each chunk ends in padding of its own (`_PADDING`)
        # Where the client's chunks differ: theirs, as a template of the string (`%b`), then of the padding's value.
        self.lane_client: bytes | None = None

    def open_lane(self, event: ServerSentEvent, index: int, text: str, pieces: Spelled) -> None:
        """A chunk that only adds `text` to one choice's content was read and sent: the chunks that differ from it
        in that string alone are taken without the reader (`pass_on`). Its bytes are cut around the string (spelled
        as orjson spells it), and the cut is checked by reading the two parts joined around a string other than
        `text`: they must be the chunk with that string as its content, whatever else they spell, keys given twice
        included (around `text` itself, a cut at another place spelling `text` would pass). An event given in more
        than one `data:` line opens no lane: a later chunk of its bytes without the second line's `data: ` would be
        half a chunk to the client's SSE parser (that line another field's), while the lane read it whole.

        A chunk that ends in OpenAI's `obfuscation` padding (its default: a value of letters and digits that differs
        in every chunk) opens a lane that takes chunks ending in padding of their own, each passed on with its own:
        the bytes compared end where the padding's value begins."""
        if event.data.find(b"\n") >= 0:
            return  # more than one `data:` line: its bytes are not the one line `raw` spells
        raw = b"data: " + event.data + b"\n\n"
        spelled = orjson.dumps(text)
        at = raw.find(_CONTENT + spelled + b"}")
        if at < 0:
            return
        start = at + len(_CONTENT) + 1  # after the string's opening quote
        head, end = raw[:start], raw[start + len(spelled) - 2 :]
        # The mark must differ from the content: read with the content's own string, a cut at another place that
        # spells the same string (a nested `"delta":{"content":...}`, a key given twice) would read as the content.
        mark = _MARKS[text == _MARKS[0]]
        read = orjson.loads(event.data)
        read["choices"][0]["delta"]["content"] = mark
        template = orjson.loads(head[6:] + mark.encode() + end[:-2])
        if template != read:
            return
        pad = read.get("obfuscation")
        padding = b""
        if pad is not None:
            padding = _PADDING + pad.encode() + PADDED_END if isinstance(pad, str) and _is_padding(pad) else b""
            if not padding or end[-len(padding) :] != padding:
                return  # padding the lane cannot tell from the chunk's end: every chunk read
            end = end[: len(end) - len(padding) + len(_PADDING)]
        if self.head != (read.get("id"), read.get("created")) or (not self.include_usage and "usage" in read):
            read["id"], read["created"] = self.head or (read.get("id"), read.get("created"))
            if not self.include_usage:
                read.pop("usage", None)
            client = sse.data_event(read)
            marked = b'"content":"' + mark.encode() + b'"'
            if client.count(marked) != 1:
                return
            cut = client.find(marked) + len(b'"content":"')
            tail = client[cut + len(mark) :]
            if padding:
                if tail[-len(padding) :] != padding:
                    return
                tail = tail[: len(tail) - len(padding) + len(_PADDING)]
            self.lane_client = _template(client[:cut], tail, *((b"",) if padding else ()))
        self.lane, self.lane_size, self.lane_end, self.lane_text = head, len(head), end, pieces
        self.lane_padded = bool(padding)

    def pass_on(self, chunk: bytes) -> bytes | None:
        """A chunk that adds to the content of the choice of the last chunk read, as that one did (`open_lane`),
        without the reader: its bytes must be that chunk's but for its string, whose first quote not escaped closes it
        (no second key, no second chunk), with no line break or other control character in it (the client's SSE
        parser would end its line there: not one event): `SPELLED_STRING`. The string, as it is
        spelled, is added to the choice's content (`Spelled`), read when the message is (one that is not JSON then
        fails the round). It goes out as it came, or, where the client's chunks differ (a later round's id and
        `created`, no `usage` the client did not ask for), in the client's bytes around the string as spelled."""
        lane = self.lane
        if lane is None:
            return None
        size = self.lane_size
        if chunk[:size] != lane:
            return None
        spelled = _STRING(chunk, size)  # no line break (`data: [DONE]` could follow it), no quote unescaped but its end
        if spelled is None:
            return None
        end = spelled.end() - 1
        tail = self.lane_end
        if self.lane_padded:  # then the padding's value, letters and digits, and the chunk's end
            cut = end + len(tail)
            if chunk[end:cut] != tail or chunk[-4:] != PADDED_END or not chunk[cut:-4].isalnum():  # bytes': ASCII
                return None
        elif chunk[end:] != tail:
            return None
        string = chunk[size:end]
        text = self.lane_text
        text += string  # as `Spelled` keeps it
        text += b'","'
        client = self.lane_client
        if client is None:
            return chunk
        if self.lane_padded:
            return client % (string, chunk[cut:])
        return client % string

    def offset(self, index: int) -> int:
        """Where this round's text of a choice begins in the client's content: after earlier rounds' text and the
        blank line that sets it off."""
        return self.before[index] + len(_SEPARATOR) if index in self.before else 0

    def sent_messages(self) -> dict[int, dict[str, Any]]:
        if self.holding:
            return self.sent
        return {index: _message(choice) for index, choice in self.choices.items()}

    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        self.close_lane()  # opened again by a chunk that only adds content
        if event.data == b"[DONE]":
            return _NOTHING
        chunk = orjson.loads(event.data)
        if chunk.get("error"):
            raise AppStreamError(event.data)
        if self.top is None:
            self.top = {key: chunk.get(key) for key in ("id", "created", "model")}
            self.top.update({key: chunk[key] for key in _TOP_FIELDS if key in chunk})
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices:
            return _NOTHING  # the usage chunk: the client's comes at the end, summed
        if not self.holding and any(
            choice.get("finish_reason") is not None
            or (choice.get("delta") or {}).keys() & {"tool_calls", "function_call"}
            for choice in choices
        ):
            self.holding = True
            self.sent = {index: _message(choice) for index, choice in self.choices.items()}
        for choice in choices:
            self.read_choice(choice)
        client = self.client_chunk(event, chunk, choices)
        if self.holding:
            self.held.append(client)
            return _NOTHING
        if len(choices) == 1 and not event.event and chunk.get("usage") is None:
            choice = choices[0]
            index, delta = choice.get("index", 0), choice.get("delta")
            if (
                type(index) is int
                and isinstance(delta, dict)
                and delta.keys() == {"content"}
                and choice.get("logprobs") is None
                and (index not in self.before or index in self.separated)
            ):
                pieces = self.choices[index]["pieces"].get("content")
                if isinstance(pieces, Spelled) and isinstance(delta["content"], str):
                    self.open_lane(event, index, delta["content"], pieces)
        return (client,)

    def read_choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = {"message": {}, "pieces": {}, "finish_reason": None, "logprobs": None}
        delta = choice.get("delta") or {}
        calls = delta.get("tool_calls")
        if calls:
            known = self.calls.setdefault(index, {})
            for call in calls:
                _merge(known.setdefault(call.get("index", 0), {}), call)
        pieces = state["pieces"]
        for key, value in delta.items():
            if isinstance(value, str) and key not in _SET_FIELDS:
                text = pieces.get(key)
                if text is None:
                    text = pieces[key] = Spelled() if key == "content" else Pieces()  # the lane adds to content
                text.add(value)  # joined once, when the message is read
            elif key != "tool_calls":
                _merge(state["message"], {key: value})
        if choice.get("finish_reason") is not None:
            state["finish_reason"] = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            known_logprobs = state["logprobs"] = state["logprobs"] or {}
            for key, value in logprobs.items():
                old = known_logprobs.get(key)
                known_logprobs[key] = old + value if isinstance(old, list) and isinstance(value, list) else value

    def client_chunk(self, event: ServerSentEvent, chunk: dict[str, Any], choices: list[Any]) -> bytes:
        """The chunk as the client gets it: rewritten only where it has to be."""
        rewritten = False
        head = (chunk.get("id"), chunk.get("created"))
        if self.head is None:
            self.head = head
        elif head != self.head:
            chunk["id"], chunk["created"] = self.head
            rewritten = True
        if not self.include_usage and "usage" in chunk:
            del chunk["usage"]
            rewritten = True
        for choice in choices:
            index = choice.get("index", 0)
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if "role" in delta:
                if index in self.opened:
                    del delta["role"]
                    rewritten = True
                self.opened.add(index)
            text = delta.get("content")
            if index in self.before and index not in self.separated and isinstance(text, str) and text:
                delta["content"] = _SEPARATOR + text
                self.separated.add(index)
                rewritten = True
        return sse.data_event(chunk) if rewritten or event.event else event.encode()

    def body(self) -> dict[str, Any] | None:
        if self.top is None or not self.choices:
            return None
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            if state["finish_reason"] is None:
                return None
            message = {"role": "assistant", "content": None, **_message(state)}
            if calls := self.calls.get(index):
                message["tool_calls"] = [
                    {key: value for key, value in calls[position].items() if key != "index"}
                    for position in sorted(calls)
                ]
            choice = {"index": index, "message": message, "finish_reason": state["finish_reason"]}
            if state["logprobs"] is not None:
                choice["logprobs"] = state["logprobs"]
            choices.append(choice)
        body = {
            "id": self.top["id"],
            "object": "chat.completion",
            "created": self.top["created"],
            "model": self.top["model"],
            **{key: self.top[key] for key in _TOP_FIELDS if key in self.top},
            "choices": choices,
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body

    def finish(
        self, final: Mapping[str, Any], fresh: bool = False, built: Mapping[str, Any] | None = None
    ) -> list[bytes]:
        choices = final.get("choices")
        choices = choices if isinstance(choices, list) else []
        head_id, created = self.head or (final.get("id"), final.get("created"))
        base = sse.chat_base({**final, "id": head_id, "created": created}, self.include_usage)
        events: list[bytes] = []
        answer = None if fresh else self.body() if built is None else built
        if answer is not None and choices == answer["choices"]:
            events += self.held
        else:
            streamed = self.sent_messages()
            sent = {} if fresh else streamed  # an override follows what was streamed; else it must continue it
            indexes = set()
            for position, choice in enumerate(choices):
                index = choice.get("index", position) if isinstance(choice, dict) else position
                indexes.add(index)
                message = choice.get("message") if isinstance(choice, dict) else None
                rest = _rest(message if isinstance(message, dict) else {}, sent.get(index, {}))
                text = rest.get("content")
                had_text = index in self.before or streamed.get(index, {}).get("content")
                if had_text and not sent.get(index, {}).get("content") and isinstance(text, str) and text:
                    rest["content"] = _SEPARATOR + text
                if isinstance(rest.get("annotations"), list):  # they point into the final text: moved to the client's
                    now = streamed.get(index, {}).get("content") if fresh else None
                    start = self.offset(index) + (len(now) + len(_SEPARATOR) if now else 0)
                    rest["annotations"] = [_moved(annotation, start) for annotation in rest["annotations"]]
                events += sse.chat_choice(base, {**choice, "message": rest}, position, opened=index in self.opened)
            if any(message.get("content") for index, message in sent.items() if index not in indexes):
                raise StreamMismatch("the answer lacks a choice whose text was already streamed")
        events += sse.chat_end(base, final.get("usage"), self.include_usage)
        return events


def _moved(annotation: Any, by: int) -> Any:
    """A `url_citation` annotation with its indexes moved `by` characters."""
    cited = annotation.get("url_citation") if isinstance(annotation, dict) else None
    if not by or not isinstance(cited, dict):
        return annotation
    moved = {key: cited[key] + by for key in ("start_index", "end_index") if isinstance(cited.get(key), int)}
    return {**annotation, "url_citation": {**cited, **moved}}


def _message(state: dict[str, Any]) -> dict[str, Any]:
    """A choice's message as read so far, its streamed strings joined."""
    return {**state["message"], **{key: str(pieces) for key, pieces in state["pieces"].items()}}


def _merge(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Add a delta to what was read: strings are appended (ids, types, names and roles replace), objects
    merged, anything else replaces; a null never erases."""
    for key, value in delta.items():
        old = target.get(key)
        if value is None:
            target.setdefault(key, None)
        elif isinstance(old, str) and isinstance(value, str) and key not in _SET_FIELDS:
            target[key] = old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            merged = dict(old)
            _merge(merged, value)
            target[key] = merged
        else:
            target[key] = value


def _rest(message: Mapping[str, Any], sent: Mapping[str, Any]) -> dict[str, Any]:
    """What of `message` the client does not have, given what it was sent of it."""
    rest = dict(message)
    for key, value in sent.items():
        if key == "role" or value is None:
            continue
        have = message.get(key)
        if isinstance(value, str):
            if not isinstance(have, str) or not have.startswith(value):
                raise StreamMismatch(f"the answer's {key} differs from what was already streamed")
            rest[key] = have[len(value) :]
        elif have != value:
            raise StreamMismatch(f"the answer's {key} differs from what was already streamed")
        else:
            del rest[key]
    return rest


def _template(*parts: bytes) -> bytes:
    """`parts` as a `%` template with a `%b` between each two (a `%` of theirs escaped: an id may hold one)."""
    return b"%b".join(part.replace(b"%", b"%%") for part in parts)


def _is_padding(value: str) -> bool:
    """OpenAI's `obfuscation` value as the lane passes it on unread: ASCII letters and digits, at least one."""
    return value.isascii() and value.isalnum()
