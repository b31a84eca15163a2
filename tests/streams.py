"""Helpers for live-stream tests: SDK accumulators over given bytes, and cutting streams into chunks."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import anthropic
from conftest import anthropic_client, openai_client
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

USER: Any = [{"role": "user", "content": "hi"}]


def sse_app(body: Iterable[bytes]) -> Any:
    """An ASGI app that answers every request with these SSE bytes."""
    chunks = list(body)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


async def anthropic_final(stream: Iterable[bytes]) -> anthropic.types.Message:
    """The message the anthropic SDK's stream helper accumulates from these bytes."""
    client = anthropic_client(sse_app(stream))
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as events:
        return await events.get_final_message()


async def openai_final(stream: Iterable[bytes]) -> Any:
    """The completion the openai SDK's stream helper accumulates from these bytes."""
    client = openai_client(sse_app(stream))
    async with client.chat.completions.stream(model="m", messages=USER) as events:
        return await events.get_final_completion()


def cut(stream: bytes, cuts: Sequence[int]) -> list[bytes]:
    """The stream cut at the given offsets (taken modulo its length)."""
    points = sorted({0, len(stream), *(point % (len(stream) + 1) for point in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def sdk_dump(message: Any) -> dict[str, Any]:
    """`model_dump` without the helpers' parse-only fields."""
    data: dict[str, Any] = message.model_dump()
    for block in data.get("content") or []:
        block.pop("parsed_output", None)
    for choice in data.get("choices") or []:
        choice["message"].pop("parsed", None)
        for call in choice["message"].get("tool_calls") or []:
            call["function"].pop("parsed_arguments", None)
    return data


class LockStep:
    """Paces a model app's stream by what its client has seen, so that tests judge streaming without timings.

    Before each marked event after the first, the app waits until the client reports (`saw`) the previous
    one, for at most `patience` seconds: `in_step` is True only if every wait ended because the client had
    it, which a buffered stream cannot do. Emission and arrival times are kept for reports.
    """

    def __init__(self, marker: bytes, patience: float = 5.0) -> None:
        self.marker = marker
        self.patience = patience
        self.seen = asyncio.Event()
        self.waits: list[bool] = []
        self.emitted: list[float] = []
        self.arrived: list[float] = []

    async def events(self, events: Iterable[bytes]) -> AsyncIterator[bytes]:
        for event in events:
            if self.marker in event:
                if self.emitted:
                    try:
                        await asyncio.wait_for(self.seen.wait(), self.patience)
                        self.waits.append(True)
                    except TimeoutError:
                        self.waits.append(False)
                    self.seen.clear()
                self.emitted.append(time.perf_counter())
            yield event

    def saw(self) -> None:
        self.arrived.append(time.perf_counter())
        self.seen.set()

    @property
    def in_step(self) -> bool:
        return bool(self.waits) and all(self.waits)


def event_stream(events: AsyncIterator[bytes] | Iterable[bytes], status: int = 200) -> StreamingResponse:
    return StreamingResponse(events, status_code=status, media_type="text/event-stream")
