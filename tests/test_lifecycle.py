"""Hooks' start-up on first use, as under a server that sends no lifespan events (daphne): one attempt at a time,
shared by every request waiting for it, bounded by `hook_timeout`, made again by the next request after a failure."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from conftest import anthropic_client
from support import Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel


class StartingHook(ToolHook):
    """Counts its start-ups and shut-downs; each start-up waits for `release` and then fails or succeeds."""

    def __init__(self, fail: bool = True) -> None:
        super().__init__()
        self.fail = fail
        self.starts = 0
        self.stops = 0
        self.release = asyncio.Event()

    async def async_startup(self) -> None:
        self.starts += 1
        await self.release.wait()
        if self.fail:
            raise ConnectionError("the tool server is down")

    async def async_shutdown(self) -> None:
        self.stops += 1


async def ask(app: Any) -> anthropic.types.Message:
    async with anthropic_client(app) as client:
        return await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


async def waiting(app: AgenticLoopMiddleware, hook: StartingHook, count: int) -> list[asyncio.Task[Any]]:
    """`count` first requests, all waiting for the hooks' start-up."""
    asked = [asyncio.create_task(ask(app)) for _ in range(count)]
    for _ in range(1000):
        if hook.starts:  # the first request began the start-up
            break
        await asyncio.sleep(0.01)
    for _ in range(100):  # and the others reached it: in-process, each is a few event loop turns behind
        await asyncio.sleep(0)
    await asyncio.sleep(0.2)  # more on a loaded machine, where the SDK's client may hop to a thread (a full run failed)
    assert hook.starts == 1
    return asked


async def test_requests_waiting_for_a_failing_start_up_share_one_attempt_and_the_next_request_makes_another() -> None:
    route = Route("messages")
    hook = StartingHook()
    app = AgenticLoopMiddleware(ScriptedModel(default=route.text("done")), hooks=[hook])

    asked = await waiting(app, hook, 4)
    hook.release.set()
    failures = await asyncio.wait_for(asyncio.gather(*asked, return_exceptions=True), 10)

    assert hook.starts == 1
    assert all(isinstance(failure, anthropic.APIStatusError) for failure in failures)
    assert {failure.status_code for failure in failures} == {503}  # type: ignore[union-attr]
    assert all("the tool server is down" in failure.message for failure in failures)  # type: ignore[union-attr]

    hook.fail = False  # the server came back: the next request starts the hooks and is answered
    answer = await asyncio.wait_for(ask(app), 10)
    assert hook.starts == 2
    assert answer.content[0].text == "done"  # type: ignore[union-attr]


async def test_requests_waiting_for_a_start_up_that_succeeds_share_it() -> None:
    route = Route("messages")
    hook = StartingHook(fail=False)
    app = AgenticLoopMiddleware(ScriptedModel(default=route.text("done")), hooks=[hook])

    asked = await waiting(app, hook, 4)
    hook.release.set()
    answers = await asyncio.wait_for(asyncio.gather(*asked), 10)

    assert hook.starts == 1
    assert [answer.content[0].text for answer in answers] == ["done"] * 4  # type: ignore[union-attr]


async def test_a_start_up_that_hangs_fails_within_hook_timeout_and_the_hook_is_shut_down() -> None:
    route = Route("messages")
    hook = StartingHook()  # never released
    app = AgenticLoopMiddleware(ScriptedModel(default=route.text("done")), hooks=[hook], hook_timeout=0.2)

    asked = await waiting(app, hook, 3)
    failures = await asyncio.wait_for(asyncio.gather(*asked, return_exceptions=True), 10)

    assert hook.starts == 1
    for failure in failures:
        assert isinstance(failure, anthropic.APIStatusError) and failure.status_code == 503
        assert "hook_timeout=0.2" in failure.message
    assert hook.stops == 1  # cut short, it may hold what it opened so far


@pytest.mark.parametrize("hook_timeout", [None, 5.0])
async def test_a_start_up_that_fails_at_once_answers_503(hook_timeout: float | None) -> None:
    route = Route("messages")
    hook = StartingHook()
    hook.release.set()
    app = AgenticLoopMiddleware(ScriptedModel(default=route.text("done")), hooks=[hook], hook_timeout=hook_timeout)

    with pytest.raises(anthropic.APIStatusError) as raised:
        await asyncio.wait_for(ask(app), 10)

    assert raised.value.status_code == 503
    assert "failed to start: ConnectionError: the tool server is down" in raised.value.message
    assert hook.stops == 0  # a hook whose start-up raised closes what it opened itself
