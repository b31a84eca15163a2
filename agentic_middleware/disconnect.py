"""Watching the client of a looped request, so that the loop stops and writing ends at once when it goes away."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import Message, Receive, Send

logger = logging.getLogger("agentic_middleware")

_WATCHER = "agentic_middleware client watch"


class ClientWatch:
    """Reads the client's `receive` once a hook acts, and cancels the loop's task on a disconnect.

    The watcher runs only while the loop's task waits, so while `guarded` is set the cancellation lands
    where the loop waits, and the loop absorbs it (`absorb`). From then on the app hears of the
    disconnect from us (`after_body`), since two readers of one `receive` would steal its messages.

    `gone` is a plain flag (every write reads it); a future for the app to wait on is made only when it asks, as most
    apps never read `receive` after their body: a gateway holds thousands of watches (benchmarks case 12).
    """

    __slots__ = ("cancelled", "gone", "guarded", "receive", "task", "waiting", "watcher")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.watcher: asyncio.Task[None] | None = None
        self.gone = False  # the client left: its disconnect came, or a write to it failed
        self.waiting: asyncio.Future[None] | None = None  # what `after_body` waits on, made by its first call
        self.guarded = False
        self.cancelled = False
        self.task: asyncio.Task[Any] | None = None  # the loop's

    def start(self) -> None:
        if self.watcher is None:
            self.task = asyncio.current_task()
            # One name for all (a task's own default name is a string of its own, per stream).
            self.watcher = asyncio.get_running_loop().create_task(self.watch(self.task), name=_WATCHER)

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None  # a cancelled task keeps its traceback, whose frame holds this watch: a cycle

    async def watch(self, task: asyncio.Task[Any] | None) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.left(task)

    def left(self, task: asyncio.Task[Any] | None = None) -> None:
        """The client is gone (its disconnect came, or a write to it failed): stop the loop as a disconnect does."""
        if self.gone:
            return
        self.gone = True
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(None)
        task = task or self.task
        if self.guarded and task is not None:
            self.cancelled = True
            task.cancel()

    def absorb(self) -> bool:
        """After a `CancelledError` in the guarded part: whether it was ours alone, now taken back."""
        task = asyncio.current_task()
        return self.cancelled and task is not None and task.uncancel() == 0

    async def after_body(self) -> Message:
        """What the app receives after its body: a disconnect, when it comes.

        Every caller waits on the one future through a shield of its own, so that a caller cancelled while it waits
        (an app polling `receive` with a timeout) leaves the future to the others."""
        if not self.gone:
            if self.waiting is None:
                self.waiting = asyncio.get_running_loop().create_future()
            await asyncio.shield(self.waiting)
        return {"type": "http.disconnect"}

    # The watch itself is what the app receives after its body (`Dispatcher.receive`): its bound `after_body` would be
    # one more object the collector tracks, held for as long as the stream lasts.
    __call__ = after_body


class ClientWriter:
    """The client's `send` for everything the middleware writes itself: it stops for good once the client left.

    The signs that it left: the watcher heard a disconnect, or a send raised. Servers differ in what a write
    to a closed connection does (uvicorn and daphne drop it, hypercorn and granian log every one, others
    raise an `OSError`), so the writer decides alone and drops the rest of the response: nothing reaches the
    server after the first sign. While the client is watched, each write that continues a stream first lets the
    event loop run once, so that a disconnect the server noticed reaches the watcher even while a long answer
    is written in a tight loop.
    """

    __slots__ = ("client", "failed", "send", "started")

    def __init__(self, send: Send, client: ClientWatch | None = None) -> None:
        self.send = send
        self.client = client
        self.failed = False
        self.started = False  # a response start was written (or attempted): no other response may begin

    @property
    def closed(self) -> bool:
        """Whether the client is known to be gone: nothing more will be written."""
        return self.failed or (self.client is not None and self.client.gone)

    async def __call__(self, message: Message) -> None:
        if message.get("more_body") and self.client is not None and self.client.watcher is not None:
            await asyncio.sleep(0)
        await self.forward(message)

    async def forward(self, message: Message) -> None:
        """Write without first letting the event loop run: for a caller that waits on something else between
        writes anyway (a live stream waits on the model app), so the watcher hears a disconnect meanwhile."""
        if self.closed:
            return
        if message["type"] == "http.response.start":
            self.started = True
        try:
            await self.send(message)
        except Exception:
            self.broke()

    def broke(self) -> None:
        """A write raised: the server's sign that the connection is closed, in whatever type it has."""
        self.failed = True
        logger.debug("writing to the client failed: the rest of the response is dropped", exc_info=True)
