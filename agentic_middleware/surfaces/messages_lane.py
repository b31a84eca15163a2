"""The Messages relay's lane (`MessagesRelay.pass_on`): the bytes of the events it takes without the SSE reader, in
the Anthropic API's own shape: a block's deltas to their string's opening quote (`lane`, `input_lane`), the events
the API writes the same every time (`BARE`), the names of the events read whole (`NAMED`)."""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson

from . import SPELLED_STRING

# The start of the one shape of text or thinking delta `MessagesRelay.pass_on` takes unread (the Anthropic API's own).
_PASSED = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_SPELLED = b'%s%%d,"delta":{"type":"%%s_delta","%%s":"' % _PASSED


@functools.lru_cache(maxsize=256)
def lane(index: int, kind: str) -> bytes:
    """The start of a block's deltas that `pass_on` takes unread: the one shape, to its string's opening quote (made
    once for every stream: a stream's blocks have the indexes of every other's)."""
    name = kind.encode()
    return _SPELLED % (index, name, name)


@functools.lru_cache(maxsize=256)
def input_lane(index: int) -> bytes:
    """The start of a call's `input_json_delta`s that `pass_on` takes unread, to its `partial_json`'s opening quote:
    the one shape, as `lane` gives a text block's."""
    return _PASSED + b'%d,"delta":{"type":"input_json_delta","partial_json":"' % index


STRING_TO_THE_END = re.compile(SPELLED_STRING + b"}}\n\n").fullmatch
"""A delta's string (text, thinking or a call's input) after its opening quote, and the event's end after it."""

# The events `pass_on` reads whole without the SSE reader, by their `event` line: the Anthropic API's own. An event
# of another name (one this version does not know) is the reader's and `feed`'s.
NAMED = {
    b"event: " + name.encode(): name
    for name in (
        *("message_start", "content_block_start", "content_block_delta", "content_block_stop"),
        *("message_delta", "message_stop", "ping", "error"),
    )
}

BARE_INDEXES = 64
"""The block indexes whose text block's start and stop `pass_on` knows by their bytes (`BARE`); a later block's are
parsed."""


def _bare_events() -> dict[bytes, dict[str, Any]]:
    """The events the Anthropic API writes the same every time, by their whole chunk: a round's stop, a ping, a
    block's stop and an empty text block's start, each at its index. What parsing such a chunk gives is known without
    parsing it: three of a round's five events that are not deltas, each of which cost about three deltas
    (benchmarks.callgrind streams). The payloads are copied where taken, one level deep (`took` copies the block)."""
    payloads: list[dict[str, Any]] = [{"type": "message_stop"}, {"type": "ping"}]
    for index in range(BARE_INDEXES):
        payloads.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
        payloads.append({"type": "content_block_stop", "index": index})
    events = {b"event: %s\ndata: %s\n\n" % (p["type"].encode(), orjson.dumps(p)): p for p in payloads}
    events[b'event: ping\ndata: {"type": "ping"}\n\n'] = {"type": "ping"}  # as the API sends its pings
    return events


BARE = _bare_events()
