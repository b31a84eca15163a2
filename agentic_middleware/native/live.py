"""Native records on a live stream: each search's record goes to the client as soon as the search completes.

The tools run inside `ServerTools`' plan, between two rounds of the stream; the stream's relay writes the records.
`LiveRecords` joins the two: the loop makes one per live request and keeps it in the request's
`logging_obj`, where `ServerTools` finds it. It runs a round's calls concurrently and hands the native calls to
the stream in the calls' order: each call is announced once the calls before it are recorded (the client sees what
is being searched), and recorded as soon as it is done, so a slow search holds back only the records after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from ..tool_results import ToolResult
from . import NativeCall, NativeRun

RECORDS_KEY = "agentic_native_live"  # where a live request's records go, in its `logging_obj.model_call_details`

Ran = tuple[ToolResult, NativeRun | None]  # a call's result, and its native record if the client declared the tool


class RecordStream(Protocol):
    """Where records go: the live stream. Each method sends its part of a call of the `round`-th round with native
    calls (counted from 0) and says whether it could (False: nothing was streamed yet, or the route has no records;
    the record then goes in the final answer, as without a live stream)."""

    async def announce(self, search: NativeCall, round: int) -> bool:
        """A call about to be searched (Messages: its `server_tool_use`; Responses: its item, `searching`)."""

    async def record(self, run: NativeRun, round: int) -> bool:
        """What came of it (Messages: its `web_search_tool_result`; Responses: `completed`, the item done)."""


class LiveRecords:
    """One live request's way to the client for native records (see `RecordStream`)."""

    __slots__ = ("rounds", "stream")  # one per live request, for its whole life

    def __init__(self, stream: RecordStream) -> None:
        self.stream = stream
        self.rounds = 0

    @staticmethod
    def of(logging_obj: Any) -> LiveRecords | None:
        details = getattr(logging_obj, "model_call_details", None)
        records = details.get(RECORDS_KEY) if isinstance(details, dict) else None
        return records if isinstance(records, LiveRecords) else None

    def keep(self, details: dict[str, Any]) -> None:
        details[RECORDS_KEY] = self

    def __deepcopy__(self, memo: dict[int, Any]) -> LiveRecords:
        return self  # a connection, not data: a hook that copies the request's details shares it

    async def run(
        self, calls: Sequence[Awaitable[Ran]], searches: Sequence[NativeCall | None]
    ) -> tuple[list[Ran], bool]:
        """Every call's outcome, in order, with whether the round's native records all went to the client.

        The calls run concurrently; `searches` says which are native. Each native call is announced once every call
        before it is done, and recorded once it is done itself.
        """
        round, self.rounds = self.rounds, self.rounds + 1
        tasks = [asyncio.ensure_future(call) for call in calls]
        streamed = True  # once a part could not go out, the rest go in the final answer too
        try:
            for task, search in zip(tasks, searches, strict=True):
                if search is not None and streamed:
                    streamed = await self.stream.announce(search, round)
                _, run = await task
                if run is not None and streamed:
                    streamed = await self.stream.record(run, round)
        finally:
            for task in tasks:
                task.cancel()  # only those not done: the request was cancelled, or the client left
            await asyncio.gather(*tasks, return_exceptions=True)  # they end here, their errors retrieved
        return [task.result() for task in tasks], streamed
