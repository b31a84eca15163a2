"""The Responses relay's lane (`TextLane.pass_on`): a text delta of the open part, in the API's own shape, passed on
in its bytes, without the SSE reader, renumbered as `ResponsesRelay.feed` would number it read; and the names of the
events the relay reads whole without the reader (`NAMED`).

Its own module because it is the relay's one hot path (most of a live stream's events), and reads and writes bytes
where the relay (responses_relay.py), which mixes it in, reads and writes events.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .. import sse
from ..sse_reader import whole_event
from . import PADDED_END, Spelled

# The start of the one shape of text delta `pass_on` takes without the reader (the Responses API's own field order,
# as OpenAI writes it and as `sse.ResponsesSequence` writes it), up to its `sequence_number`'s digits.
DELTA = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
# What may follow a delta's string, from its closing quote: the API's `logprobs` (empty: none were asked for), then
# the event's end; or nothing but the end; or, after the `logprobs`, OpenAI's `obfuscation` padding (`_PADDING`).
_ENDS = frozenset((b'","logprobs":[]}\n\n', PADDED_END))
_PADDING = b'","logprobs":[],"obfuscation":"'
_PLAIN = re.compile(rb'([ !#-\[\]-~]*+)"(?:,"logprobs":\[\](?:,"obfuscation":"[0-9A-Za-z]++"|)|)}\n\n').fullmatch
"""A delta's string from after its opening quote, and one of the ends after it (`_ENDS`, `_PADDING`), when the string
is printable ASCII without a quote or a backslash: JSON whatever it says, spelled as orjson spells it (most text
deltas). One C call checks it all; any other string is checked as `spelled_end` checks it. Each optional part is a
branch with an empty alternative, `(?:...|)`, not `(?:...)?`: the same strings, but `re` runs a group's `?` as a
general repeat, which allocates its context at each match (about a fifth of what the match costs; the repeats are
possessive, as `SPELLED_STRING`'s, since neither class holds what follows it)."""
_NO_TEXT = Spelled()

# The events `ResponsesRelay.pass_on` reads whole without the SSE reader, by their `event` line: the Responses API's
# own. An event of another name (one this version does not know) is the reader's and `feed`'s.
NAMED = {
    b"event: " + name.encode(): name
    for name in (
        *("response.created", "response.in_progress", "response.queued", "error"),
        *("response.completed", "response.incomplete", "response.failed"),
        *("response.output_item.added", "response.output_item.done"),
        *("response.content_part.added", "response.content_part.done"),
        *("response.output_text.delta", "response.output_text.done", "response.output_text.annotation.added"),
        *("response.refusal.delta", "response.refusal.done"),
        *("response.function_call_arguments.delta", "response.function_call_arguments.done"),
        *("response.custom_tool_call_input.delta", "response.custom_tool_call_input.done"),
        *("response.reasoning_summary_part.added", "response.reasoning_summary_part.done"),
        *("response.reasoning_summary_text.delta", "response.reasoning_summary_text.done"),
        *("response.reasoning_text.delta", "response.reasoning_text.done"),
        *("response.web_search_call.in_progress", "response.web_search_call.searching"),
        "response.web_search_call.completed",
    )
}
NOT_PASSED = object()  # `passed` while no delta of the open lane went out: no chunk is it


def _template(*parts: bytes) -> bytes:
    """`parts` as a `%` template with a `%d` between each two (a `%` of theirs escaped: an id may hold one)."""
    return b"%d".join(part.replace(b"%", b"%%") for part in parts)


class TextLane:
    """The lane of `ResponsesRelay`: `open_lane` when an `output_text` part of a message that went out begins, then
    its deltas in the one shape are taken by `pass_on` until any other event comes (`close_lane`, from `feed`)."""

    __slots__ = ("app_next", "lane", "lane_moved", "lane_out", "lane_text", "passed", "passed_at")

    emit: sse.ResponsesSequence
    base: int
    items: dict[int, Any]
    parts: dict[int, list[Any]]
    texts: dict[tuple[int, int], Spelled]
    app_next: int  # the `sequence_number` the app's next event has, when its last one had one (`feed` sets it)
    lane: bytes | None  # a delta of the open part to its string's opening quote, as a template of its number (`%d`)
    lane_out: bytes  # the same for the client, its output_index moved after the earlier rounds' items, and a `%b`
    lane_moved: bytes  # what the client's delta spells after its number, to its string's opening quote (shown.py)
    lane_text: Spelled  # the open part's text as its deltas spelled it (`texts`)
    passed: object  # the last delta of the open lane that `pass_on` passed on, as it went out (shown.py)
    passed_at: int  # where the string of that delta begins in it
    took: Callable[[str, dict[str, Any], bytes], Sequence[bytes]]  # `ResponsesRelay.took`: what `feed` does

    def open_lane(self, payload: dict[str, Any]) -> None:
        """An `output_text` part of a message that went out began: its deltas in the one shape (`DELTA`), for this
        item and part, are taken without the reader (`pass_on`) until any other event comes."""
        index, item_id, part = payload.get("output_index"), payload.get("item_id"), payload.get("content_index")
        if type(index) is not int:
            return
        item = self.items.get(index)
        if (
            not isinstance(item, dict)
            or item.get("type") != "message"
            or type(item_id) is not str
            or type(part) is not int
            or part != len(self.parts.get(index, ())) - 1  # the SDK's place for the part: the deltas go there
            or not isinstance(payload.get("part"), dict)
            or payload["part"].get("type") != "output_text"
        ):
            return
        # Joined, not formatted: the id is the app's, and may hold a `%`.
        spelled = b',"item_id":' + orjson.dumps(item_id) + b',"output_index":'
        after = b',"content_index":%d,"delta":"' % part
        lane = spelled + b"%d" % index + after
        self.lane = _template(DELTA, lane)
        self.lane_text = self.texts.setdefault((index, part), Spelled())
        self.lane_moved = spelled + b"%d" % (index + self.base) + after if self.base else lane
        self.lane_out = _template(DELTA, self.lane_moved) + b"%b"

    def close_lane(self) -> None:
        self.lane = None
        self.lane_text = _NO_TEXT  # only an open lane adds to it
        self.lane_moved = self.lane_out = b""
        self.passed = NOT_PASSED  # a delta passed on is one of the open lane's (`lane_spelling`)

    def lane_spelling(self) -> tuple[bytes, bytes]:
        """What every delta of the open lane that `pass_on` passes on (`passed`) spells before its string, but for
        its `sequence_number`'s digits: its event's name and type, then its item, output_index and content_index as
        the client has them. shown.py looks for the hidden ids there once a lane, then only from the string on."""
        return DELTA, self.lane_moved

    def pass_on(self, chunk: bytes) -> bytes | None:
        """A text delta of the open part (`open_lane`) without the reader: its bytes checked for the one shape that
        allows it, renumbered in bytes as `feed` renumbers it read (the JSON `feed` writes, as the app spelled it).

        Every byte up to its string is compared with what it must be, in one compare: the event's name and type
        (`DELTA`), the `sequence_number` after the app's last, as servers number their events (so no digits are
        read), the open part's item, output_index and content_index as `open_lane` spelled them. Its string and
        what follows it must be printable ASCII, then one of the ends the API writes (`_PLAIN`: one `re` match, no
        parse), or else pass `spelled_end`. The string, as it is spelled, is kept with its part's (`Spelled`,
        `texts`), to be read when the part or its item is done and compared with the text they tell (`check_done`,
        `check_texts`). It goes out as it came when the app's number is the client's in the first round, else with
        the client's number and output_index; it is `passed` then, its string at `passed_at` (`lane_spelling` is
        what comes before). Any other chunk: as `whole` takes it."""
        lane = self.lane
        if lane is None:
            return self.whole(chunk)
        head = lane % self.app_next
        text = len(head)  # where the delta's string begins
        if chunk[:text] != head:  # a slice compared costs less than `startswith`, which parses its arguments
            return self.whole(chunk)
        plain = _PLAIN(chunk, text)
        end = plain.end(1) if plain is not None else spelled_end(chunk, text)
        if end < 0:
            return self.whole(chunk)
        kept = self.lane_text
        kept += chunk[text:end]  # as `Spelled` keeps it, to be read when the part is done
        kept += b'","'
        app, emit = self.app_next, self.emit
        ours = emit.next
        self.app_next, emit.next = app + 1, ours + 1
        if app == ours and not self.base:
            self.passed, self.passed_at = chunk, text
            return chunk
        out: bytes = self.lane_out % (ours, chunk[text:])
        self.passed, self.passed_at = out, len(out) - len(chunk) + text
        return out

    def whole(self, chunk: bytes) -> bytes | None:
        """Any event of a known name (`NAMED`) in a chunk of its own, in the one form the SSE reader reads as it came,
        its JSON `type` its name: parsed once and taken as `feed` takes it (`took`), without the reader. Anything else
        (a string that is not JSON too: the reader fails the round with `feed`'s own error): None."""
        read = whole_event(chunk, NAMED)
        if read is None:
            return None
        name, data = read
        if data == b"[DONE]":  # as `feed` takes it: not the API's, some servers end their streams with it
            return b""
        payload = orjson.loads(data)  # not JSON: the stream cannot be read, as in `feed`
        if type(payload) is not dict or payload.get("type") != name:
            return None  # another event under this one's name (JSON's last key wins), or no object: `feed` reads it
        out = self.took(name, payload, chunk)
        return out[0] if len(out) == 1 else b"".join(out)  # empty: held or dropped


def spelled_end(chunk: bytes, text: int) -> int:
    """Where the string of a delta that begins at `text` ends (its closing quote), when it is followed by one of the
    ends the API writes (`_ENDS`, `_PADDING`) and is JSON (orjson reads it, as `feed` would); else -1. Its first quote
    must be the one before that end (no quote within it: no second key, no second event)."""
    end = chunk.find(b'"', text)
    if chunk.find(b"\\u00", text, end) >= 0:
        return -1  # can spell an id's ASCII, which shown.py looks for in bytes: `feed`'s way writes it as orjson does
    tail = chunk[end:]
    if tail not in _ENDS and not (
        tail[: len(_PADDING)] == _PADDING and tail[-4:] == PADDED_END and tail[len(_PADDING) : -4].isalnum()
    ):
        return -1  # (`isalnum` of bytes: ASCII letters and digits only, nothing in the padding to read)
    try:
        orjson.loads(chunk[text - 1 : end + 1])  # an escaped quote before an end's spelling is not JSON either
    except orjson.JSONDecodeError:
        return -1  # a bad escape, bytes that are not UTF-8, half a surrogate pair, a control character
    return end
