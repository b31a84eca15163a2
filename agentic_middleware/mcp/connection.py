"""The one MCP session to a server, kept open: opened at start, reopened with backoff when it drops, its tool list
followed as the server changes it.

`Connection` is the session's life, apart from what is asked of it: the transport (streamable HTTP or stdio), the
reconnection, the change stream, whether a session that failed a call still lives, the calls in flight let read
their answers before a dropped session closes. `Session` (session.py) adds the calls, each made at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

import httpx2
import mcp_types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError

from ..concurrency import cancel_and_wait
from .stdio import bounded_stdio_client
from .transport import CallGuard, marking, sent_to

logger = logging.getLogger("agentic_middleware")

FIRST_RETRY = 0.1  # seconds before the first reconnection; doubled after each failure
LAST_RETRY = 30.0
CHECK_TIMEOUT = 10.0  # seconds a session that failed a call has to list its tools, or it is reopened


class Connection:
    """The session to one server, kept open: `refresh` is given each new session's client (and again when the
    server says its tools changed); `on_request` sees each HTTP request to the server before it goes."""

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        label: str,
        timeout: float,
        connect_timeout: float,
        headers: Mapping[str, str],
        max_connections: int | None,
        max_result_bytes: int,
        mode: Any,
        refresh: Callable[[Client], Coroutine[Any, Any, None]],
        on_request: Callable[[httpx2.Request], Awaitable[None]],
    ) -> None:
        self.server = server
        self.label = label
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.headers = dict(headers)
        self.max_connections = max_connections
        self.max_result_bytes = max_result_bytes
        self.mode = mode
        self._refresh = refresh
        self._on_request = on_request
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Future[None] | None = None
        self._checking: asyncio.Future[None] | None = None  # a ping asking whether a session that failed a call lives
        self._events()

    def _events(self) -> None:
        """Fresh events for each start: an event belongs to the loop that first waits on it."""
        self._connected = asyncio.Event()  # a session is open
        self._dropped = asyncio.Event()  # the open session failed: reopen it
        self._cut = asyncio.Event()  # ... and can answer no more: the calls in flight on it end at once
        self._in_flight = 0  # calls waiting for their answer on the open session
        self._answered = asyncio.Event()  # set whenever none is
        self._wake = asyncio.Event()  # a call is waiting: reconnect now rather than after the backoff
        self._outcome: asyncio.Future[bool] | None = None  # how the next connection attempt ends
        self._closing = False

    async def start(self) -> None:
        """Start keeping the session open; raises what the first attempt raised (TimeoutError past the bound)."""
        if self._runner is not None:
            return
        self._events()
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = _detached(self._keep_open(first), name=f"MCP session {self.label}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                await asyncio.shield(first)
        except Exception:
            first.cancel()  # a later outcome of this attempt goes unread
            raise

    async def close(self) -> None:
        """Close the session (and end a stdio server's process).

        An open session is ended from inside, so that its HTTP session gets its `DELETE`; one still connecting
        (a server hanging at `initialize`) is cancelled at once rather than waited for: the transports end
        what they opened when cancelled (a stdio server's stdin is closed, then its process group is ended: stdio.py).
        """
        runner, self._runner = self._runner, None
        await cancel_and_wait(self._checking)
        if runner is not None:
            self._closing = True
            self._end()
            self._wake.set()
            if not self._connected.is_set():
                await cancel_and_wait(runner)
                return
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await asyncio.shield(runner)
            except TimeoutError:
                await cancel_and_wait(runner)

    async def _keep_open(self, first: asyncio.Future[None]) -> None:
        """Keep one session open: connect, serve until it drops, wait (doubling), connect again."""
        delay = FIRST_RETRY
        while not self._closing:
            self._wake.clear()
            attempt, self._outcome = self._outcome, None  # the calls waiting before this attempt began
            try:
                async with self._open() as client:
                    await self._refresh(client)
                    self._client = client
                    self._dropped.clear()
                    self._cut.clear()
                    self._connected.set()
                    self._settle(attempt, True)
                    self._settle(self._outcome, True)
                    if not first.done():
                        first.set_result(None)
                    elif delay > FIRST_RETRY:
                        logger.warning("MCP server %s: reconnected", self.label)
                    delay = FIRST_RETRY
                    await self._serve(client)
                    await self._answers_in_flight()
                    if self._closing:
                        return
                    logger.warning("MCP server %s: the session dropped; reconnecting", self.label)
            except Exception as error:
                if not first.done():
                    first.set_exception(error)
                else:
                    logger.debug("MCP server %s: connection failed: %r", self.label, error)
                self._settle(attempt, False)  # those waiting since it began wait for the next one
            finally:
                self._client = None
                self._connected.clear()
                if self._closing:
                    self._settle(attempt, False)
                    self._settle(self._outcome, False)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()  # a call waiting for the server cuts the wait short
            delay = min(delay * 2, LAST_RETRY)

    def _settle(self, outcome: asyncio.Future[bool] | None, connected: bool) -> None:
        """Tell the calls waiting for a connection attempt how it ended."""
        if outcome is not None and not outcome.done():
            outcome.set_result(connected)
        if outcome is self._outcome:
            self._outcome = None

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(self.server, str):
                pool = httpx2.Limits(max_connections=self.max_connections)  # a call waits for a connection
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self.headers,
                        timeout=httpx2.Timeout(self.timeout, read=None),  # no longer than `timeout`
                        transport=CallGuard(httpx2.AsyncHTTPTransport(limits=pool), self.max_result_bytes),
                        event_hooks={"request": [self._on_request], "response": [self._watch_session]},
                    )
                )
                transport: Any = streamable_http_client(
                    self.server, http_client=http, max_sse_event_size=self.max_result_bytes
                )
            else:
                command = [sys.executable if self.server[0] == "python" else self.server[0], *self.server[1:]]
                parameters = StdioServerParameters(
                    command=command[0], args=command[1:], encoding_error_handler="replace"
                )
                if sys.platform == "win32":
                    # The SDK's own transport on Windows, where its process handling (a job object) is the SDK's:
                    # its lines are unbounded (a line far over max_result_bytes is read whole, then refused by
                    # `Session.call`). Bytes that are not UTF-8 read as U+FFFD, as ours reads them: the SDK's
                    # strict default ends its reader on the first one and leaves the session hung.
                    transport = stdio_client(parameters)
                else:
                    transport = bounded_stdio_client(parameters, self.max_result_bytes)  # stdio.py
            async with asyncio.timeout(self.connect_timeout):
                client = await stack.enter_async_context(
                    Client(
                        marking(transport, self._end, http=isinstance(self.server, str)),
                        mode=self.mode,
                        message_handler=self._on_message,
                        cache=None,
                    )
                )
            yield client

    async def _serve(self, client: Client) -> None:
        """Wait until the session drops, refetching the tools whenever the server says they changed."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                listening = asyncio.ensure_future(self._follow(client, changes))
                try:
                    await self._dropped.wait()
                finally:
                    await cancel_and_wait(listening)
        except (ListenNotSupportedError, MCPError) as error:
            # An older server sends changes as notifications (`_on_message`); one that serves no change stream
            # keeps the list it gave at the start.
            logger.debug("MCP server %s: no change stream: %s", self.label, error)
            await self._dropped.wait()

    async def _follow(self, client: Client, changes: AsyncIterator[Any]) -> None:
        try:
            async for _ in changes:
                await self._refresh(client)
        except Exception as error:
            logger.debug("MCP server %s: change stream lost: %r", self.label, error)
        self._end()

    async def _on_message(self, message: Any) -> None:
        """Notifications of an older server: a changed tool list. What the transport could not read (a stdio
        server's stray stdout line, as `npx` prints) is logged and passed over, as the SDK itself does: the session
        is not ended for it, so no call running on it is lost. A session that is gone shows by its calls failing."""
        if isinstance(message, Exception):
            logger.warning("MCP server %s sent what is not an MCP message, passed over: %s", self.label, message)
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            client = self._client
            if client is not None:
                self._refreshing = asyncio.ensure_future(self._refresh(client))

    async def _watch_session(self, response: httpx2.Response) -> None:
        """A 404 to a request that carries the session id means the server ended the session (a restart, an
        expiry): the spec says to open a new one. The server refused the request for it, before running anything,
        so a call that got it ran nowhere and is made once on the new session (`Session.call`)."""
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            attempt = sent_to.get()
            if attempt is not None:
                attempt.refused = True
            self._dropped.set()

    def _end(self) -> None:
        """The session can answer no more (its transport ended, its change stream was lost, it is closing)."""
        self._cut.set()
        self._dropped.set()

    async def _answers_in_flight(self) -> None:
        """Before a dropped session is closed, let the calls in flight on it read their answers, unless it was cut
        (then they end at once): after a 404 to the session's id, each call sent with it gets its own answer, its
        own 404 (then it ran nowhere and is sent again) or its result, where closing the session under them would
        leave the model reading that their outcome is unknown."""
        if self._in_flight and not self._cut.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await self._answered.wait()

    def _drop(self, client: Client, *, cut: bool = True) -> None:
        """The session `client` belongs to is gone: reopen it (calls arriving meanwhile wait for that)."""
        if self._client is client:
            if cut:
                self._cut.set()
            self._dropped.set()
            self._client = None
            self._connected.clear()

    def _check(self, client: Client) -> None:
        """Ask whether the session that just failed a call still lives (a `tools/list`, which every tool server
        answers in both protocols, where `ping` is gone from the 2026 one); reopen it if not."""
        if self._client is client and (self._checking is None or self._checking.done()):
            self._checking = _detached(self._alive(client), name=f"MCP session {self.label}: check")

    async def _alive(self, client: Client) -> None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                await client.list_tools(cache_mode="refresh")
        except Exception as error:
            if self._client is client:
                logger.warning("MCP server %s: the session does not answer (%s): reopening it", self.label, error)
                self._drop(client)


def _detached(work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
    """A task of the session's own, in a context of its own: not the context of the request that happened to set
    it off (a call that failed, the first request of a server without lifespan), whose forwarded headers the HTTP
    client's request hook would otherwise send with the session's own requests (its `tools/list`, `initialize`)."""
    return asyncio.get_running_loop().create_task(work, name=name, context=contextvars.Context())
