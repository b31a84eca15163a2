"""The stdio transport to an MCP server, with each line it reads bounded by `max_result_bytes`.

The SDK's `stdio_client` joins each chunk it reads to the part of the line read so far (`(buffer + chunk).split`), a
copy of the whole part per chunk, and keeps a line whatever its length: a line of n bytes costs time growing as n²
in the gateway's event loop, every call on the session waits behind it, and a line over the bound was refused only
once read whole. Here a line's chunks are kept in a list and only each new chunk is searched for the newline, so
reading is linear; a line past the bound is kept no further (its first and last `EDGE` bytes only, where its id is)
and read to its end only to be thrown away, and the call it answers gets a `TOO_LARGE` error, which the session
reads as over `max_result_bytes`: at once when the id is found before the result, since nothing more of the line
will be read for it; a line whose id is not found answers no call (never guessed: a stray line would fail
another's). The rest is the SDK's, from its public pieces: the process in a session of its own (so that its whole
tree can be ended), stderr left to the gateway's, messages written as the SDK writes them, and its shutdown. POSIX
only: on Windows connection.py keeps the SDK's `stdio_client` (a job object holds the tree).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import mcp_types
import orjson
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage

from .transport import TOO_LARGE

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]

EDGE = 256  # bytes kept of each end of a line over the bound: where a server writes its id
STOP_WAIT = 2.0  # seconds the server has to exit once its stdin is closed, then to die once terminated (the SDK's)
WATCH_EVERY = 0.1  # seconds between looks at whether the server's own process has exited
GONE_WAIT = 0.5  # seconds the session waits, once the server exited, for its stdout to close (a child may hold it)

CANCELLED = "notifications/cancelled"

# A top-level member whose value is a scalar within reach: a string with no escape or control character, an integer
# as JSON writes it (`007`, `1.5`, `1e3` are none), true, false, null. Anything else (an object, a value cut at the
# end of what is kept, or one malformed) leaves the member's value unread (None).
_SCALAR = rb'"[^"\\\x00-\x1f]*"|-?(?:0|[1-9][0-9]*)(?![0-9.eE])|true|false|null'
_MEMBER = re.compile(rb'\s*"([A-Za-z_]+)"\s*:\s*(' + _SCALAR + rb")?\s*")
# The last members of a line, scalars all, then the brace that closes it: top-level members, whatever came before
_LAST = re.compile(rb'(?:,\s*"[A-Za-z_]+"\s*:\s*(?:' + _SCALAR + rb")\s*)+\}\s*\Z")
_PAIRS = re.compile(rb'"([A-Za-z_]+)"\s*:\s*(' + _SCALAR + rb")")


def _head(head: bytes) -> tuple[bool, dict[bytes, bytes]]:
    """Whether a line's first bytes show an answer, and its members read before its result: its top-level members,
    in any order, up to the first `"result"` or `"error"` (an answer), each a scalar, none `"method"` (a request or
    notification of the server's, whose id is not one of ours). Else it is not taken for an answer."""
    start = head.lstrip()
    if not start.startswith(b"{"):
        return False, {}
    members: dict[bytes, bytes] = {}
    at = len(head) - len(start) + 1
    while (member := _MEMBER.match(head, at)) is not None:
        if member[1] in (b"result", b"error"):
            return b"method" not in members, members
        if member[2] is None or head[member.end() : member.end() + 1] != b",":
            break
        members[member[1]] = member[2]
        at = member.end() + 1
    return False, members


def _tail(tail: bytes) -> dict[bytes, bytes]:
    """A line's last top-level members, after its result (the TypeScript SDK writes `...},"jsonrpc":"2.0","id":N}`,
    some `...},"id":N,"jsonrpc":"2.0"}`); none if one is `"method"`."""
    last = _LAST.search(tail)
    members = dict(_PAIRS.findall(last[0])) if last is not None else {}
    return {} if b"method" in members else members


def _request_id(value: bytes | None) -> mcp_types.RequestId | None:
    """The id a member's value names, if it is one (a string or an integer); a string that is not UTF-8 is none."""
    try:
        ident = orjson.loads(value) if value is not None else None
    except ValueError:
        return None
    return coerce_request_id(ident) if isinstance(ident, int | str) and not isinstance(ident, bool) else None


class _Line:
    """The line being read: its chunks while within the bound; past it, its first and last bytes and its length."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.head = b""
        self.tail = b""
        self.over = False
        self.answered = False  # the call it answers was told (from the id at its head) before its end

    def add(self, piece: bytes, limit: int) -> bool:
        """Add a piece of the line; whether it is the one that took the line past `limit`."""
        self.size += len(piece)
        if len(self.head) < EDGE:
            self.head += piece[: EDGE - len(self.head)]
        self.tail = piece[-EDGE:] if len(piece) >= EDGE else (self.tail + piece)[-EDGE:]
        if self.over:
            return False
        self.parts.append(piece)
        if self.size <= limit:
            return False
        self.over, self.parts = True, []
        return True


@contextlib.asynccontextmanager
async def bounded_stdio_client(server: StdioServerParameters, max_result_bytes: int) -> AsyncIterator[Streams]:
    """Run `server` and talk to it over its stdin and stdout, as the SDK's `stdio_client` does (the same streams:
    `SessionMessage`s, and an Exception for a line that is no JSON-RPC message), each line bounded (see the module).
    """
    process: Process = await anyio.open_process(
        [server.command, *server.args],
        env=get_default_environment() | (server.env or {}),
        stderr=None,  # inherited: the gateway's stderr (fd 2), as the SDK's default gives, whatever `sys.stderr` is now
        cwd=server.cwd,
        start_new_session=True,  # its own process group: ended whole at shutdown, and when the server exits
    )
    # No await until the task group is entered, or a cancellation there would leak the process (as in the SDK).
    reading, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, writing = anyio.create_memory_object_stream[SessionMessage](0)
    in_flight: dict[mcp_types.RequestId, str] = {}  # id -> method of each request sent and not yet answered
    written = anyio.Event()
    stdout_ended = anyio.Event()

    def over(line: _Line, ended: bool) -> SessionMessage | Exception | None:
        """What to hand the session for a line over the bound: an error answering its call, once the line shows
        itself an answer and its id is found (at its head, at once; else at its end, among its last members); at
        its end, else, an Exception (logged and passed over: no call is ever guessed, so a stray line fails none)."""
        answer, members = _head(line.head)
        ident = members.get(b"id")
        if answer and ident is None and ended:
            ident = _tail(line.tail).get(b"id")
        call = _request_id(ident) if answer else None
        if call is not None and call in in_flight:
            line.answered = True
            del in_flight[call]
            error = mcp_types.ErrorData(code=TOO_LARGE, message=f"an answer over {max_result_bytes} bytes")
            return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=call, error=error))
        if not ended:
            return None
        return ValueError(f"a line of {line.size} bytes, over max_result_bytes and answering no call in flight")

    def parse(line: _Line) -> SessionMessage | Exception:
        text = b"".join(line.parts).decode(errors="replace")  # bytes that are not UTF-8 read as U+FFFD
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValueError as error:  # connection.py's `_on_message` logs it and passes it over, as the SDK
            return error
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError) and message.id is not None:
            in_flight.pop(coerce_request_id(message.id), None)
        return SessionMessage(message)

    async def read() -> None:
        assert process.stdout is not None
        try:
            async with reading:
                line = _Line()
                async for chunk in process.stdout:
                    start = 0
                    while True:
                        end = chunk.find(b"\n", start)
                        if line.add(chunk[start:] if end < 0 else chunk[start:end], max_result_bytes):
                            early = over(line, ended=False)
                            if early is not None:
                                await reading.send(early)
                        if end < 0:
                            break
                        item = parse(line) if not line.over else None if line.answered else over(line, ended=True)
                        line = _Line()
                        if item is not None:
                            await reading.send(item)  # one line at a time: no read-ahead while it waits
                        start = end + 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session is gone, or our own shutdown closed the pipe; the session sees the stream end
        finally:
            stdout_ended.set()
            await _drain(process)

    async def watch() -> None:
        """End the session when the server's own process exits, though its stdout may not close (a child of it
        holds it open): its group is ended (the server is gone, and its children with it), what it wrote before
        is read while its stdout closes (`GONE_WAIT` at most, the pipe holds no more than it wrote), and then the
        session's stream ends, so that the calls in flight read that the server went and the next one reconnects.
        The exit is seen from `returncode`."""
        while process.returncode is None:
            await anyio.sleep(WATCH_EVERY)
        async with anyio.create_task_group() as ending:
            ending.start_soon(terminate_posix_process_tree, process, STOP_WAIT)
            with anyio.move_on_after(GONE_WAIT):
                await stdout_ended.wait()
            await reading.aclose()

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with writing:
                async for item in writing:
                    message = item.message
                    if isinstance(message, mcp_types.JSONRPCRequest):
                        in_flight[coerce_request_id(message.id)] = message.method
                    elif isinstance(message, mcp_types.JSONRPCNotification) and message.method == CANCELLED:
                        cancelled = cancelled_request_id_from_params(message.params)  # it will not be answered
                        if cancelled is not None:
                            in_flight.pop(coerce_request_id(cancelled), None)
                    data = message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode(errors="replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await reading.aclose()  # the server may live on: the session sees the stream end, no call hangs
        finally:
            written.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        tasks.start_soon(watch)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # every wait in it is bounded; unshielded, a cancel leaks the server
                read_stream.close()  # the reader drains: a server stuck writing its stdout can read its stdin again
                write_stream.close()
                with anyio.move_on_after(0.5):  # the messages accepted are written
                    await written.wait()
                await _stop(process)
                for stream in (read_stream, write_stream, reading, writing):
                    await stream.aclose()
                await anyio.lowlevel.checkpoint()
            tasks.cancel_scope.cancel()


async def _drain(process: Process) -> None:
    """Read and drop what the server still writes until its stdout closes: a server blocked writing to a full pipe
    could otherwise not exit when its stdin closes."""
    assert process.stdout is not None
    ended = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)
    with anyio.CancelScope(shield=True), contextlib.suppress(*ended):
        while True:
            await process.stdout.receive()


async def _stop(process: Process) -> None:
    """The spec's shutdown, with the SDK's times: close stdin, give the server `STOP_WAIT` to exit, then terminate
    its process group (killed `STOP_WAIT` later), also when the server exited by itself: what is left of the group
    is its children, which end with it. The exit is seen from `returncode`, not `wait()`, which on asyncio also
    waits for the pipes to close, as a child that inherited them may never do."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    exited = await _exited(process)
    await terminate_posix_process_tree(process, STOP_WAIT)
    if not exited:
        await _exited(process)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()  # one that survived the kill holds the pipe open: the reader stops anyway
    # The asyncio subprocess transport, else left open (and warning when collected) while a descendant holds a pipe.
    close = getattr(getattr(getattr(process, "_process", None), "_transport", None), "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


async def _exited(process: Process) -> bool:
    with anyio.move_on_after(STOP_WAIT):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return False
