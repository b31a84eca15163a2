"""Case 10: one big event of a live stream, cut into small messages, against the same event in one message.

A model app may send a long text delta (or an image in a Responses stream) as one event that arrives in many
small ASGI messages. The middleware's own CPU time for a live request whose answer holds one text delta of 1, 4
or 10 MB, sent in 1 KB or 16 KB messages, is compared with the same stream in one message, each paired with the
app serving the stream alone (whose time is taken off). Reading must stay linear in the bytes, whatever the cut:
the ratio stays near 1 (reading each message again with all that came before it made it grow with the size).
"""

from __future__ import annotations

from time import thread_time_ns

from starlette.types import Receive, Scope, Send

from agentic_middleware import AgenticLoopMiddleware, sse
from agentic_middleware.testing import message

from .cases import KB, MB, Config, Row, size_name
from .e2e_hooks import Lookup
from .harness import Sample, median, median_difference, paired, us
from .live_stream import SSE_START, Client, request

MARK = b"message_stop"


def big_stream(size: int) -> bytes:
    """A Messages answer whose one text block is a single delta of `size` characters."""
    body = message("")
    text = "x" * size
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    events = [sse.messages_start(body), *list(sse.messages_block(0, {"type": "text", "text": ""}))[:1]]
    events += [sse.named_event("content_block_delta", delta)]
    events.append(sse.named_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return b"".join([*events, *sse.messages_end({**body, "usage": {"input_tokens": 10, "output_tokens": 1}})])


class PieceApp:
    """A zero-latency model app sending one stream in messages of `piece` bytes (0: the whole stream in one)."""

    def __init__(self, stream: bytes, piece: int) -> None:
        step = piece or len(stream)
        self.pieces = [stream[start : start + step] for start in range(0, len(stream), step)]

    def rewind(self) -> None:
        """Nothing to rewind: every call sends the same stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send(SSE_START)
        for piece in self.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def cpu_sample(app: object) -> Sample:
    """The CPU time of one streaming request, in nanoseconds (the process is alone in its thread)."""

    async def run() -> float:
        client = Client(request(), MARK)
        cpu = thread_time_ns()
        await client.run(app)
        return thread_time_ns() - cpu

    return run


async def big_events(config: Config) -> list[Row]:
    sizes = (64 * KB, 256 * KB) if config.quick else (MB, 4 * MB, 10 * MB)
    pieces = (KB, 16 * KB)
    rows: list[Row] = []
    own: dict[tuple[int, int], float] = {}
    for size in sizes:
        stream = big_stream(size)
        variants: dict[str, Sample] = {}
        for piece in (0, *pieces):
            model = PieceApp(stream, piece)
            variants[f"wrapped {piece}"] = cpu_sample(AgenticLoopMiddleware(model, hooks=[Lookup()], streaming=True))
            variants[f"bare {piece}"] = cpu_sample(PieceApp(stream, piece))
        runs = await paired(variants, config.pairs(15 if size < 10 * MB else 9), warmup=1)
        for piece in (0, *pieces):
            own[size, piece] = median_difference(runs[f"wrapped {piece}"], runs[f"bare {piece}"])
        whole = own[size, 0]
        for piece in pieces:
            rows.append(
                Row(
                    10,
                    f"one {size_name(size)} event of a live stream",
                    f"own time in {size_name(piece)} messages / in one message",
                    own[size, piece] / whole,
                    2.0,
                    f"own {us(own[size, piece])} in {-(-len(stream) // piece)} messages, {us(whole)} in one; "
                    f"the app alone {us(median(runs[f'bare {piece}']))}",
                )
            )
    return rows


CASES = {10: big_events}
