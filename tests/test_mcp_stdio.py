"""The bounded stdio transport (agentic_middleware/mcp/stdio.py), against a real server built with the `mcp` SDK
(tests/mcp_recording_server.py) and one speaking JSON-RPC by hand (tests/mcp_raw_server.py): an answer line over
`max_result_bytes` is that call's error without being kept, the calls beside it are answered, the session goes on,
and the server's process is ended on close, even under cancellation.

Orderings are shown by events (a server that holds a line half written until told), never by timings; the outer
timeouts only turn a hang into a failure."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from test_mcp import HandshakeMCPTools, tools_class
from test_mcp_sessions import RECORDING, _runs, _settled

from agentic_middleware.mcp import MCPTools
from agentic_middleware.mcp.stdio import bounded_stdio_client

__all__ = ["tools_class"]  # the fixture: each test runs with the 2026 protocol and with the handshake

RAW = str(Path(__file__).with_name("mcp_raw_server.py"))
BOUND = 1_000_000
OVER = "over max_result_bytes=1000000 and was not read"
HANG = 60  # seconds past which a wait is a hang, and fails the test


@asynccontextmanager
async def started(hook: MCPTools) -> AsyncIterator[MCPTools]:
    await hook.async_startup()
    try:
        yield hook
    finally:
        await hook.async_shutdown()


async def run(hook: MCPTools, tool: str, **arguments: Any) -> tuple[str, bool]:
    async with asyncio.timeout(HANG):
        result = await hook.by_name[tool].run(**arguments)
    return result.content, result.is_error


def gone(pid: int) -> bool:
    """Whether the process has ended: no such process, or a zombie (ended, its parent gone, not yet reaped)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return True
    except OSError:
        return False  # no /proc (macOS): it runs
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_an_answer_far_over_the_bound_is_refused_before_its_line_ends_and_the_call_beside_it_is_answered(
    tmp_path: Path, tools_class: type[MCPTools], caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's server answers `big` with a line of 20 MB (the text twice: content and structuredContent), held
    after its first 2 MB until `release` is called. The big call reads that it is over the bound while its line is
    still held, so the gateway read no more of it than the bound to know; a call sent while the line is held ran
    on the server, and is answered once the line ends, on the same session, as are the calls after it."""
    runs = tmp_path / "runs"
    hook = tools_class(
        [sys.executable, RECORDING, str(runs), "--hold"], max_result_bytes=BOUND, timeout=HANG, required=True
    )
    async with started(hook):
        big = asyncio.ensure_future(run(hook, "big", size=10_000_000))
        await _settled(lambda: any(line.startswith("held") for line in _runs(runs)))
        small = asyncio.ensure_future(run(hook, "record", order="o1", seconds=0))
        await _settled(lambda: any(line.startswith("o1") for line in _runs(runs)))  # it ran; its answer waits
        content, is_error = await big  # the line is still held: this is read from its first bytes
        assert is_error and content == f"big failed: its result is {OVER}", content
        assert not small.done()  # its answer is on the wire after the held line
        assert await run(hook, "release") == ("released", False)
        assert await small == ("recorded o1", False)
        pid = _runs(runs)[0].split()[1]
        assert all(line.endswith(pid) for line in _runs(runs))  # one process throughout
        assert await run(hook, "big", size=100) == ("x" * 100, False)  # the session goes on
    assert "dropped" not in caplog.text and "passed over" not in caplog.text
    assert gone(int(pid))


@pytest.mark.parametrize("id_at", ["tail", "middle", "kotlin", "sorted", "none"])
async def test_an_answer_over_the_bound_with_its_id_anywhere_among_its_first_or_last_members_or_nowhere(
    tmp_path: Path, id_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A line over the bound answers its call though another call is in flight (sent while the line was half
    written), wherever its id is among its top-level members before or after its result: last (the TypeScript
    SDK's order), before a last `jsonrpc`, first with `jsonrpc` last (the Kotlin SDK's), first in sorted keys. With
    no id, the line answers none and is passed over (logged), and each call reads what the server says next. The
    session goes on in every case. In every case the line is not kept: what the gateway allocates while it is read
    (20 MB) stays within a few times the bound."""
    runs = tmp_path / "runs"
    hook = MCPTools([sys.executable, RAW, str(runs)], max_result_bytes=BOUND, timeout=HANG, required=True)
    async with started(hook):
        tracemalloc.start()
        big = asyncio.ensure_future(run(hook, "big", size=20_000_000, id_at=id_at))
        await _settled(lambda: _runs(runs) == ["big"])
        beside = asyncio.ensure_future(run(hook, "echo", text="beside"))
        if id_at == "none":
            assert await big == ("after an unreadable line", False)
        else:
            assert await big == (f"big failed: its result is {OVER}", True)
        assert await beside == ("beside", False)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 4 * BOUND, peak
        assert await run(hook, "echo", text="after") == ("after", False)
    passed_over = "sent what is not an MCP message, passed over: a line of" in caplog.text
    assert passed_over == (id_at == "none")
    assert "dropped" not in caplog.text


@pytest.mark.parametrize(
    ("tool", "arguments", "answer"),
    [
        ("stray_big", {"size": 3_000_000}, "after a stray line"),
        ("big", {"size": 3_000_000, "id_at": "none", "wait": False}, "after an unreadable line"),
    ],
)
async def test_a_line_over_the_bound_whose_id_is_not_found_fails_not_the_one_call_in_flight(
    tmp_path: Path, tool: str, arguments: dict[str, Any], answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stray line over the bound that is not JSON, or an answer whose id is null, while one call is in flight:
    the line is passed over (logged), not taken for that call's answer, and the call reads its own answer."""
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs")], max_result_bytes=BOUND, timeout=HANG, required=True)
    async with started(hook):
        assert await run(hook, tool, **arguments) == (answer, False)
        assert await run(hook, "echo", text="after") == ("after", False)
    assert "sent what is not an MCP message, passed over: a line of" in caplog.text


@pytest.mark.parametrize("ident", ["007", '"a\tb"', '"\xff"'])
async def test_a_line_over_the_bound_whose_id_is_malformed_is_passed_over_and_the_session_goes_on(
    tmp_path: Path, ident: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An id JSON does not allow (leading zeros, a raw tab in a string, a byte that is not UTF-8) is no id: the line
    is passed over, the call reads the answer that follows, on the same server (the reader did not fail)."""
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs")], max_result_bytes=BOUND, timeout=HANG, required=True)
    async with started(hook):
        before, _ = await run(hook, "pid")
        assert await run(hook, "bad_id", size=3_000_000, id=ident) == ("after a bad id", False)
        assert await run(hook, "pid") == (before, False)
    assert "sent what is not an MCP message, passed over: a line of" in caplog.text


async def test_a_notification_over_the_bound_is_passed_over_not_taken_for_the_answer_of_the_call_in_flight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs")], max_result_bytes=BOUND, timeout=HANG, required=True)
    async with started(hook):
        assert await run(hook, "shout", size=3_000_000) == ("shouted", False)
    assert "passed over: a line of" in caplog.text


async def test_stray_lines_and_bytes_that_are_not_utf_8_are_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hook = HandshakeMCPTools([sys.executable, RAW, str(tmp_path / "runs")], timeout=HANG, required=True)
    async with started(hook):
        with caplog.at_level(logging.WARNING):
            assert await run(hook, "stray") == ("caf\ufffd", False)  # a byte that is not UTF-8 reads as U+FFFD
        assert await run(hook, "echo", text="after") == ("after", False)
    assert caplog.text.count("sent what is not an MCP message, passed over") == 2
    assert "dropped" not in caplog.text


async def test_a_server_that_will_not_exit_is_ended_with_its_child_on_close(tmp_path: Path) -> None:
    """Its stdin closed, the server stays and ignores SIGTERM: its process group is terminated (the child goes),
    then it is killed; nothing is left running once the session is closed."""
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs"), "--stubborn"], timeout=HANG, required=True)
    async with started(hook):
        said, _ = await run(hook, "pid")
    pid, child = (int(part.split("=")[1]) for part in said.split())
    assert gone(pid) and gone(child)


async def test_the_server_is_ended_when_the_task_holding_the_transport_is_cancelled(tmp_path: Path) -> None:
    server = StdioServerParameters(command=sys.executable, args=[RAW, str(tmp_path / "runs")])
    pids: list[int] = []
    holding = asyncio.Event()

    async def hold() -> None:
        async with Client(bounded_stdio_client(server, BOUND), mode="legacy") as client:
            result = await client.call_tool("pid", {})
            pids.append(int(str(result.content[0].model_dump()["text"]).split()[0].split("=")[1]))
            holding.set()
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(hold())
    async with asyncio.timeout(HANG):
        await holding.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pids[0])  # ended before the cancellation was done


async def test_a_server_that_dies_while_its_child_holds_its_stdout_ends_the_session_and_the_child(
    tmp_path: Path,
) -> None:
    """The server starts a child that inherits its stdout, then exits: the session ends though the pipe stays open
    (the call in flight reads that the server went, not a timeout), the child is ended, and the next call is served
    by a new server."""
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs")], timeout=HANG, required=True)
    async with started(hook):
        before, _ = await run(hook, "pid")
        said, _ = await run(hook, "spawn")
        child = int(said.split("=")[1])
        content, is_error = await run(hook, "crash")
        assert is_error and "became unreachable while the call ran" in content, content
        await _settled(lambda: gone(child))  # ended: it closed the pipe in its exit, a moment before it is gone
        after, _ = await run(hook, "pid")
        assert after != before
    assert gone(int(after.split()[0].split("=")[1]))


async def test_the_children_of_a_server_that_exits_at_close_are_ended(tmp_path: Path) -> None:
    hook = MCPTools([sys.executable, RAW, str(tmp_path / "runs"), "--child"], timeout=HANG, required=True)
    async with started(hook):
        said, _ = await run(hook, "pid")
    pid, child = (int(part.split("=")[1]) for part in said.split())
    assert gone(pid) and gone(child)
