"""The pieces every replayed stream is made of: events framed as the SSE standard frames them, and strings cut
into deltas.

Strings are cut into pieces of `chunk_size` characters, so clients see deltas shaped like the real APIs', but
never into more than `MAX_PIECES`: a long string gets longer pieces. A client accumulates a delta by copying what
it has so far (the SDKs do `text += delta`), so its work grows with the number of pieces times the string's
length: fixed-size pieces of a 3 MB answer (11,700 events) took the anthropic SDK 6.5 s to accumulate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

CHUNK_SIZE = 256
"""Characters per text, thinking, tool-input or arguments delta, for strings up to `MAX_PIECES` times it."""
MAX_PIECES = 64
"""The most deltas one string is cut into: past 16 KB (at the default size), pieces grow with the string."""


def pieces(text: str, size: int) -> Iterator[str]:
    """`text` in pieces of `size` characters, or in `MAX_PIECES` equal pieces when that takes fewer."""
    step = max(size, 1, -(-len(text) // MAX_PIECES))
    for start in range(0, len(text), step):
        yield text[start : start + step]


def named_event(name: str, payload: Mapping[str, Any]) -> bytes:
    """A named event."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def data_event(payload: Mapping[str, Any]) -> bytes:
    """An unnamed event (chat's chunks)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"
