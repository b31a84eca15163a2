"""The response of a streaming request the loop takes part in.

The model app is called without streaming; the client gets SSE headers at once, keep-alives while
the loop runs (so clients and proxies do not time out during long tools), then the final answer
as the events of its route's own format, or an error event if the loop failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from .asgi import json_start
from .concurrency import cancel_and_wait
from .disconnect import ClientWriter
from .dispatch import Reply
from .sniff import media_type
from .surfaces import Surface

logger = logging.getLogger("agentic_middleware")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx and its kin: pass events on as they come
]


class EventStream:
    """Writes one client's event stream: opened once the guardrails judged the request, closed with its reply.

    A reply that ends the request before the stream opened (a guardrail's refusal) is written as it is, with
    its status.

    Every write goes through the client's `ClientWriter`, so nothing is written once the client left.
    """

    def __init__(self, write: ClientWriter, surface: Surface, stream_options: Any, interval: float) -> None:
        self.write = write
        self.surface = surface
        self.stream_options = stream_options
        self.interval = interval
        self.pinger: asyncio.Task[None] | None = None
        self.opened = False
        self.done = False  # the stream's end was written, or the client left

    async def open(self) -> None:
        await self.start()
        self.pinger = asyncio.ensure_future(self.keep_alive())

    async def start(self) -> None:
        self.opened = True
        await self.write({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def keep_alive(self) -> None:
        keepalive = self.surface.keepalive()
        while not self.write.closed:
            await asyncio.sleep(self.interval)
            await self.write({"type": "http.response.body", "body": keepalive, "more_body": True})

    async def stop_keep_alive(self) -> None:
        await cancel_and_wait(self.pinger)

    async def close(self, reply: Reply | None) -> None:
        """Write the reply as events, then end the stream."""
        await self.stop_keep_alive()
        if not self.opened:
            if reply is None:
                return
            if not 200 <= reply.start["status"] < 300:  # an error before the stream began: with its status
                await self.write(reply.start)
                await self.write({"type": "http.response.body", "body": reply.body})
                self.done = True
                return
            await self.start()
        try:
            events = list(self.events(reply)) if reply is not None else []
        except Exception as error:  # an answer of a shape the events cannot carry: say so, in the stream
            logger.exception("could not write the answer as a stream")
            events = [self.surface.error_event(502, f"the answer could not be streamed: {error}", "model_app_error")]
        await self.end(events)

    async def abort(self, status: int, message: str, code: str) -> None:
        """End a stream that began but cannot be finished (the request was cancelled) with an error event."""
        await self.stop_keep_alive()
        if self.opened and not self.done:
            await self.end([self.surface.error_event(status, message, code)])
        elif not self.opened and not self.write.started:
            body = self.surface.error_body(status, message, code)
            await self.write(json_start(status, len(body)))
            await self.write({"type": "http.response.body", "body": body})
            self.done = True

    async def end(self, events: Iterable[bytes]) -> None:
        """Write the last events and the end of the stream, stopping at once if the client leaves meanwhile."""
        for event in events:
            await self.write({"type": "http.response.body", "body": event, "more_body": True})
            if self.write.closed:
                break
        else:
            await self.write({"type": "http.response.body", "body": b""})
        self.done = True

    def events(self, reply: Reply) -> Iterator[bytes]:
        status = reply.start["status"]
        if 200 <= status < 300 and media_type(reply.start.get("headers", ()))[0] == b"text/event-stream":
            return iter((reply.body,))  # the app streamed anyway: its events, as it sent them
        try:
            body = orjson.loads(reply.body)
        except orjson.JSONDecodeError:
            body = None
        if 200 <= status < 300 and isinstance(body, dict):
            return self.surface.stream_events(body, self.stream_options)
        message, code = error_of(body, reply.body, status)
        return iter((self.surface.error_event(status if status >= 400 else 502, message, code),))


def error_of(body: Any, raw: bytes, status: int) -> tuple[str, str]:
    """The message and code of an error answer in either route's shape, else its text."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"], str(error.get("code") or error.get("type") or "model_app_error")
    if 200 <= status < 300:
        return "the model app's answer was not a JSON object", "model_app_error"
    return f"the model app answered {status}: {raw[:1000].decode(errors='replace')}", "model_app_error"
