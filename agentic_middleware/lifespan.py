"""Hooks' start-up and shut-down, run on the ASGI lifespan events the middleware sees.

A hook may define `async_startup()` (open connections, fetch tool lists) and `async_shutdown()`. They run after
the wrapped app has started, so a hook may use what the app opens, and before the app shuts down. An app served
without lifespan events (daphne sends none) starts its hooks on the first request that takes part instead.

The shut-down waits (up to `DRAIN_TIMEOUT`) for the looped requests in flight to end: a server that stops past its
grace period cancels them, and what their cancellation still does (cleanup hooks, the 503 or the stream's error
event) must happen before the server is told the app has shut down, since some servers (uvicorn) end the process then.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .concurrency import awaitable
from .errors import ConfigurationError
from .hooks import BoundHook, overridden

logger = logging.getLogger("agentic_middleware")

STARTUP = "async_startup"
SHUTDOWN = "async_shutdown"
DRAIN_TIMEOUT = 10.0  # seconds the shut-down waits at most for the looped requests in flight to end


def _clashes(hooks: Sequence[BoundHook]) -> str | None:
    """The first tool name two hooks both declare, described; hooks name theirs with `declared_tool_names()`."""
    owners: dict[str, str] = {}
    for hook in hooks:
        names = getattr(hook.hook, "declared_tool_names", None)
        label = getattr(hook.hook, "label", None)  # which server, for hooks of one class (MCPTools)
        who = f"{hook.name} ({label})" if isinstance(label, str) else hook.name
        for name in names() if callable(names) else ():
            if name in owners:
                return f"tool {name!r} is declared by both {owners[name]} and {who}"
            owners[name] = who
    return None


class _CutShort(ConfigurationError):
    """A hook's start-up that ran past `hook_timeout`: it may hold what it opened so far, so it is shut down."""


def _raised(outcome: object) -> bool:
    """Whether a start-up's outcome is its own failure (not a cut short or cancelled one, which may hold things)."""
    return isinstance(outcome, BaseException) and not isinstance(outcome, _CutShort | asyncio.CancelledError)


class InFlight:
    """Counts the looped requests running, their cancellation included, so that the shut-down waits for them.

    One object serves every request, so entering it costs no more than the count. `begin` and `end`, not a `with`:
    the `with` would hold its bound `__exit__` for as long as the request lasts, one more object the collector tracks
    for each of thousands of streams.
    """

    def __init__(self) -> None:
        self.count = 0
        self.drained: asyncio.Event | None = None  # set when the count falls to 0, for a shut-down waiting

    def begin(self) -> None:
        self.count += 1

    def end(self) -> None:
        self.count -= 1
        if not self.count and self.drained is not None:
            self.drained.set()


class HookLifecycle:
    """Starts the hooks once, stops them once the requests using them have ended; safe to ask from many requests."""

    def __init__(self, hooks: Sequence[BoundHook]) -> None:
        self.hooks = tuple(hooks)
        self.starting = [(hook, awaitable(method)) for hook in hooks if (method := overridden(hook.hook, STARTUP))]
        self.stopping = [
            (hook, awaitable(method)) for hook in reversed(hooks) if (method := overridden(hook.hook, SHUTDOWN))
        ]
        self.started = not self.starting
        self._attempt: asyncio.Future[None] | None = None
        self.in_flight = InFlight()  # `begin` and `end` around each looped request
        clash = _clashes(self.hooks)  # tools known now; those known only once started are checked then
        if clash:
            raise ConfigurationError(f"{clash}: give one of them a `prefix` (or leave the tool out)")

    async def start(self, timeout: float | None = None) -> None:
        """Run every `async_startup` at once, each within `timeout`; on a failure, stop those that started, raise.

        One attempt at a time: whoever asks while one runs waits for it and shares its outcome, success or
        failure; whoever asks after a failure makes a new one. A caller that gives up does not cut it short.
        """
        if self.started:
            return
        if self._attempt is None:
            self._attempt = asyncio.ensure_future(self._start(timeout))
            self._attempt.add_done_callback(_retrieved)
        await asyncio.shield(self._attempt)

    async def _start(self, timeout: float | None) -> None:
        """Start the hooks concurrently: the start takes as long as the slowest hook, not the sum (two MCP servers
        slow to answer keep the port closed for one wait, not two). The first failure cancels the others."""
        tasks = [asyncio.ensure_future(self._start_one(hook, method, timeout)) for hook, method in self.starting]
        try:
            await asyncio.gather(*tasks)
            clash = _clashes(self.hooks)
            if clash:
                raise ConfigurationError(f"{clash}: give one of them a `prefix` (or leave the tool out)")
        except BaseException:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            # Shut down those that started, and those cut short (they may hold what they opened so far); not
            # those whose own start-up raised.
            opened = [hook for (hook, _), outcome in zip(self.starting, outcomes, strict=True) if not _raised(outcome)]
            await self._stop([(h, m) for h, m in self.stopping if h in opened])
            raise
        else:
            self.started = True
        finally:
            self._attempt = None

    @staticmethod
    async def _start_one(hook: BoundHook, method: Callable[[], Awaitable[Any]], timeout: float | None) -> None:
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                await method()
        except Exception as error:
            if deadline.expired():
                raise _CutShort(f"hook {hook.name} failed to start within hook_timeout={timeout:g} s") from None
            raise ConfigurationError(f"hook {hook.name} failed to start: {type(error).__name__}: {error}") from error

    async def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Wait, up to `timeout`, until no looped request is in flight."""
        in_flight = self.in_flight
        if not in_flight.count:
            return
        in_flight.drained = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):
                await in_flight.drained.wait()
        except TimeoutError:
            logger.warning("shutting down with %d looped request(s) still running after %g s", in_flight.count, timeout)

    async def stop(self) -> None:
        """Run every `async_shutdown`, at once; a failure is logged and the others still run."""
        if not self.started:
            return
        self.started = False
        await self._stop(self.stopping)

    async def _stop(self, stopping: Sequence[tuple[BoundHook, Callable[[], Awaitable[Any]]]]) -> None:
        """Stop the hooks concurrently (each closes its own sessions); a failure is logged, the others still run."""

        async def stop(hook: BoundHook, method: Callable[[], Awaitable[Any]]) -> None:
            try:
                await method()
            except Exception:
                logger.exception("hook %s failed to shut down", hook.name)

        await asyncio.gather(*(stop(hook, method) for hook, method in stopping))

    async def lifespan(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the lifespan events to the app, starting the hooks after it and stopping them before it.

        If the hooks fail to start, the app is shut down again and the server is told the start failed. If the
        app does not take part in lifespan (it raises or returns without answering), the hooks are run here.
        """
        answered = False
        failure: Exception | None = None
        received_startup = False
        receive = self._draining(receive)

        async def app_receive() -> Message:
            nonlocal received_startup
            if failure is not None:
                return {"type": "lifespan.shutdown"}  # the start failed: let the app close what it opened
            message = await receive()
            if message["type"] == "lifespan.startup":
                received_startup = True
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
            return message

        async def app_send(message: Message) -> None:
            nonlocal answered, failure
            kind = message["type"]
            if kind == "lifespan.startup.complete":
                failure = await self._try_start()
                if failure is not None:
                    return  # told once the app has shut down
            if failure is not None and kind.startswith("lifespan.shutdown."):
                return
            answered = True
            await send(message)

        try:
            await app(scope, app_receive, app_send)
        except Exception:
            if answered or failure is not None:
                raise
            logger.debug("the wrapped app does not take part in lifespan: the middleware answers for its hooks")
        if failure is not None:
            await self._fail(send, failure)
        if not answered:
            await self._answer_lifespan(receive, send, received_startup)

    def _draining(self, receive: Receive) -> Receive:
        """The server's `receive`, which hands on `lifespan.shutdown` once the looped requests in flight have ended."""

        async def draining() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.drain()
            return message

        return draining

    async def _try_start(self) -> Exception | None:
        try:
            await self.start()
        except Exception as error:
            logger.error("start-up failed: %s", error)
            return error
        return None

    @staticmethod
    async def _fail(send: Send, error: Exception) -> None:
        """Tell the server, then raise, as Starlette does: servers read the message, test managers the raise."""
        await send({"type": "lifespan.startup.failed", "message": "".join(traceback.format_exception_only(error))})
        raise error

    async def _answer_lifespan(self, receive: Receive, send: Send, received_startup: bool) -> None:
        """The lifespan protocol for an app that does not speak it: start, wait for shutdown, stop."""
        if not received_startup:
            await receive()
        failure = await self._try_start()
        if failure is not None:
            await self._fail(send, failure)
        await send({"type": "lifespan.startup.complete"})
        while (await receive())["type"] != "lifespan.shutdown":
            pass
        await self.stop()
        await send({"type": "lifespan.shutdown.complete"})


def _retrieved(attempt: asyncio.Future[None]) -> None:
    """Mark a start-up attempt's failure as seen even when every request that waited for it gave up."""
    if not attempt.cancelled():
        attempt.exception()
