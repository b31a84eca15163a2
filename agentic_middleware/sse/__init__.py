"""One finished response, replayed as a server-sent event stream in its route's own format.

The loop calls the model app without streaming; a client that asked for a stream still gets one, built here from
the final body so that the official SDKs' stream accumulators rebuild exactly the message the non-streaming path
returns. One module per wire format, as in `surfaces/`: `messages.py`, `chat.py`, `responses.py`, each built on
`framing.py` (an event's bytes, a string cut into deltas). Every name is re-exported here, so that callers write
`sse.messages_events(...)` whatever module a format's events live in.
"""

from .chat import DONE, chat_base, chat_choice, chat_chunks, chat_end, chat_error, chat_keepalive
from .framing import CHUNK_SIZE, MAX_PIECES, data_event, named_event
from .messages import messages_block, messages_end, messages_error, messages_events, messages_ping, messages_start
from .responses import (
    ResponsesSequence,
    responses_end,
    responses_error,
    responses_events,
    responses_failed,
    responses_item,
    responses_start,
)

__all__ = [
    "CHUNK_SIZE",
    "DONE",
    "MAX_PIECES",
    "ResponsesSequence",
    "chat_base",
    "chat_choice",
    "chat_chunks",
    "chat_end",
    "chat_error",
    "chat_keepalive",
    "data_event",
    "messages_block",
    "messages_end",
    "messages_error",
    "messages_events",
    "messages_ping",
    "messages_start",
    "named_event",
    "responses_end",
    "responses_error",
    "responses_events",
    "responses_failed",
    "responses_item",
    "responses_start",
]
