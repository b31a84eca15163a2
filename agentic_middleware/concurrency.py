"""User code that must not stall the event loop: sync functions run in a worker thread, async ones as they are.

A tool calling `requests.get`, or a hook method written as a plain `def`, would otherwise hold up every
request of the process while it runs, and no timeout could interrupt it. Starlette runs sync endpoints in
its thread pool for the same reason; we use the same pool (`run_in_threadpool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool


def is_async_callable(function: object) -> bool:
    """Whether calling `function` returns a coroutine: an `async def`, a partial of one, or an object with one."""
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def awaitable(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """`function` as an async callable, decided once: itself when async, else a call in a worker thread.

    Awaiting the threaded call can be cancelled (a timeout applies), but the thread cannot be: it runs
    to its end and its late result is dropped. A sync function that returns an awaitable has it awaited here.
    """
    if is_async_callable(function):
        return function

    @functools.wraps(function)
    async def in_thread(*args: Any, **kwargs: Any) -> Any:
        result = await run_in_threadpool(function, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    return in_thread


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel a helper task (a keep-alive pinger, a listener) and wait until it has ended, so nothing of it runs on."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
