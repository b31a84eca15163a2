"""User code that must not stall the event loop: sync functions run in a worker thread, async ones as they are.

A tool calling `requests.get`, or a hook method written as a plain `def`, would otherwise hold up every
request of the process while it runs, and no timeout could interrupt it. Starlette runs sync endpoints in
its thread pool for the same reason; we use the same pool and the same limit (AnyIO's default limiter).

A thread cannot be killed, so its slot is held until the thread returns, not until its caller stops waiting:
otherwise every call abandoned at its timeout would free a slot while its thread ran on, and calls that hang
would grow the process's threads without bound. At the limit a new call waits for a slot, within its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread


def is_async_callable(function: object) -> bool:
    """Whether calling `function` returns a coroutine: an `async def`, a partial of one, or an object with one."""
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def awaitable(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """`function` as an async callable, decided once: itself when async, else a call in a worker thread.

    Awaiting the threaded call can be cancelled (a timeout applies), but the thread cannot be: it runs
    to its end, holding its slot of the thread limit, and its late result is dropped. A sync function that
    returns an awaitable has it awaited here.
    """
    if is_async_callable(function):
        return function

    @functools.wraps(function)
    async def in_thread(*args: Any, **kwargs: Any) -> Any:
        result = await run_in_thread(functools.partial(function, *args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result

    return in_thread


# The threads themselves come from AnyIO's worker pool; the limit is the default limiter's, taken here.
_UNLIMITED = anyio.CapacityLimiter(1_000_000)


async def run_in_thread(call: Callable[[], Any]) -> Any:
    """`call()` in a worker thread, within the running loop's default thread limit (Starlette's, 40 by default).

    Waiting for a slot can be cancelled, and then nothing ran. Once the thread has it, the slot is given back
    when the thread returns: a caller that stops waiting (its timeout) leaves the slot held by a thread still
    running, so threads that hang fill the limit and no more are started.
    """
    limiter = anyio.to_thread.current_default_thread_limiter()
    holder = object()
    await limiter.acquire_on_behalf_of(holder)
    try:
        running = asyncio.ensure_future(anyio.to_thread.run_sync(call, limiter=_UNLIMITED))
    except BaseException:
        limiter.release_on_behalf_of(holder)
        raise
    running.add_done_callback(functools.partial(_returned, limiter, holder))
    return await asyncio.shield(running)


def _returned(limiter: anyio.CapacityLimiter, holder: object, running: asyncio.Future[Any]) -> None:
    """The thread returned: its slot is free again, and the result of a call nobody waits for any more is dropped."""
    limiter.release_on_behalf_of(holder)
    if not running.cancelled():
        running.exception()  # retrieved, so that an abandoned call's exception is not logged as never retrieved


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel a helper task (a keep-alive pinger, a listener) and wait until it has ended, so nothing of it runs on."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
