"""Gateways for test_shutdown.py to run under the real uvicorn CLI, each with a looped request that cannot end by
itself: the rerun hangs in the model app, or a blocking sync tool runs. They write what happens, one line at a time,
to the file named by $SHUTDOWN_RECORD, which the test reads.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, ServerTools, server_tool
from agentic_middleware.testing import RecordedRequest, ScriptedModel, message, tool_use

CLEANUP_SECONDS = 0.3  # long enough that a process ending at once would cut the cleanup short


def record(line: str) -> None:
    with open(os.environ["SHUTDOWN_RECORD"], "a") as file:
        file.write(f"{line}\n")


async def hang_on_rerun(request: RecordedRequest) -> Any:
    """The first call asks for the tool; the rerun never answers."""
    if request.body["messages"][-1]["content"] == "again":
        record("waiting")
        await asyncio.Event().wait()
    return message(tool_use("lookup", {"q": 1}, "toolu_1"))


class RerunHook:
    agentic_loop_streaming = True

    async def async_should_run_agentic_loop(self, kwargs: dict[str, Any], **_: Any) -> tuple[bool, dict[str, Any]]:
        return kwargs["_agentic_loop_depth"] == 0, {"tool_calls": ["lookup"]}

    async def async_build_agentic_loop_plan(self, messages: list[Any], **_: Any) -> AgenticLoopPlan:
        patch = AgenticLoopRequestPatch(messages=[*messages, {"role": "user", "content": "again"}])
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)


class AsyncCleanup(RerunHook):
    async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: dict[str, Any]) -> None:
        record("cleanup started")
        await asyncio.sleep(CLEANUP_SECONDS)
        record("cleanup done")


class SyncCleanup(RerunHook):
    def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: dict[str, Any]) -> None:
        record("cleanup started")
        time.sleep(CLEANUP_SECONDS)
        record("cleanup done")


def fetch(url: str) -> str:
    """Blocks, as `requests.get` without a timeout would."""
    record("waiting")
    threading.Event().wait(60)
    return "page"


def call_fetch(request: RecordedRequest) -> Any:
    return message(tool_use("fetch", {"url": "https://example.com"}, "toolu_1"))


async_cleanup = AgenticLoopMiddleware(ScriptedModel(default=hang_on_rerun), hooks=[AsyncCleanup()])
sync_cleanup = AgenticLoopMiddleware(ScriptedModel(default=hang_on_rerun), hooks=[SyncCleanup()])
blocking_tool = AgenticLoopMiddleware(
    ScriptedModel(default=call_fetch), hooks=[ServerTools([server_tool(fetch)], timeout=60)]
)
