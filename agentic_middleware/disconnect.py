"""Watching the client of a looped request, so that the loop stops at once when it goes away."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message, Receive


class ClientWatch:
    """Reads the client's `receive` once a hook acts, and cancels the loop's task on a disconnect.

    The watcher runs only while the loop's task waits, so while `guarded` is set the cancellation lands
    where the loop waits, and the loop absorbs it (`absorb`). From then on the app hears of the
    disconnect from us (`after_body`), since two readers of one `receive` would steal its messages.
    """

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.watcher: asyncio.Task[None] | None = None
        self.disconnected: asyncio.Event | None = None
        self.guarded = False
        self.cancelled = False

    @property
    def gone(self) -> bool:
        return self.disconnected is not None and self.disconnected.is_set()

    def start(self) -> None:
        if self.watcher is None:
            self.disconnected = asyncio.Event()
            self.watcher = asyncio.ensure_future(self.watch(asyncio.current_task()))

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()

    async def watch(self, task: asyncio.Task[Any] | None) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        assert self.disconnected is not None
        self.disconnected.set()
        if self.guarded and task is not None:
            self.cancelled = True
            task.cancel()

    def absorb(self) -> bool:
        """After a `CancelledError` in the guarded part: whether it was ours alone, now taken back."""
        task = asyncio.current_task()
        return self.cancelled and task is not None and task.uncancel() == 0

    async def after_body(self) -> Message:
        """What the app receives after its body: a disconnect, when it comes."""
        assert self.disconnected is not None
        await self.disconnected.wait()
        return {"type": "http.disconnect"}
