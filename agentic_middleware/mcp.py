"""MCP servers as server tools: `MCPTools` declares an MCP server's tools to the model and runs its calls.

    from agentic_middleware.mcp import MCPTools
    app.add_middleware(AgenticLoopMiddleware, hooks=[MCPTools("http://docs:8000/mcp", prefix="docs")])

Built on the official `mcp` SDK (the `[mcp]` extra). It is a `ServerTools` whose tools come from the server, so
MCP tools run on every route, concurrently, under the per-call timeout, with errors as results the model reads.
One session per server serves every request: opened when the gateway starts, reopened with backoff when it drops,
and its tool list fetched again when the server says it changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fnmatch
import logging
import re
import sys
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from typing import Any

import anyio
import httpx2
import mcp_types
import orjson
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError

from .concurrency import cancel_and_wait
from .errors import ConfigurationError
from .schema import portable
from .surfaces import Image, ToolResult
from .tools import ServerTool, ServerTools

logger = logging.getLogger("agentic_middleware")

FIRST_RETRY = 0.1  # seconds before the first reconnection; doubled after each failure
LAST_RETRY = 30.0
MIN_CONNECT_TIMEOUT = 30.0  # a stdio server may take seconds to start even when calls are bounded tighter
_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")  # what both APIs accept in a tool name, 64 characters at most


class MCPTools(ServerTools):
    """A hook serving the tools of one MCP server: `server` is a streamable HTTP URL or a stdio command.

    `prefix` names the tools `<prefix>_<name>` (two servers with the same tool name need one); `allowed_tools`
    and `denied_tools` are tool names or shell patterns (`"get_*"`), as the server names them. `timeout` bounds
    each call, and the connection (at least 30 s). `headers` go with every HTTP request to the server;
    `forward_headers` names headers of the client's request that go with each call made for it (per-user auth).
    A server that cannot be reached at start-up leaves its tools out (and keeps being retried), unless
    `required`, which fails the start. `max_connections` bounds the HTTP connections to the server (each call in
    flight holds one, the change stream one more; None for no bound).
    """

    mode = "auto"
    """How the SDK negotiates: "auto" tries the 2026 protocol and falls back to the handshake; "legacy" forces it."""

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        prefix: str | None = None,
        allowed_tools: str | Iterable[str] | None = None,
        denied_tools: str | Iterable[str] = (),
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        forward_headers: str | Iterable[str] = (),
        required: bool = False,
        max_connections: int | None = 100,
    ) -> None:
        super().__init__(tools=(), timeout=timeout)
        self.server = server
        self.prefix = prefix
        self.allowed_tools = None if allowed_tools is None else _names(allowed_tools, "allowed_tools")
        self.denied_tools = _names(denied_tools, "denied_tools")
        self.headers = dict(headers or {})
        self.forward_headers = tuple(name.lower() for name in _names(forward_headers, "forward_headers"))
        self.required = required
        self.max_connections = max_connections
        self._check()
        self.connect_timeout = max(timeout, MIN_CONNECT_TIMEOUT)
        self.label = server if isinstance(server, str) else " ".join(server)
        self._forwarded: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
            "forwarded", default=None
        )
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Future[None] | None = None
        self._events()

    def _events(self) -> None:
        """Fresh events for each start: an event belongs to the loop that first waits on it."""
        self._connected = asyncio.Event()  # a session is open
        self._dropped = asyncio.Event()  # the open session failed: reopen it
        self._wake = asyncio.Event()  # a call is waiting: reconnect now rather than after the backoff
        self._outcome: asyncio.Future[bool] | None = None  # how the next connection attempt ends
        self._closing = False
        self._session_gone = False  # the HTTP server answered 404 to our session id: it ended the session

    def _check(self) -> None:
        if isinstance(self.server, str):
            url = httpx2.URL(self.server) if self.server.startswith(("http://", "https://")) else None
            if url is None or not url.host:
                raise ConfigurationError(f"MCP server {self.server!r}: a URL must be http:// or https:// and a host")
        elif not self.server or not all(isinstance(part, str) for part in self.server):
            raise ConfigurationError(f"MCP server {self.server!r}: a stdio command is a non-empty list of strings")
        elif self.headers or self.forward_headers:
            raise ConfigurationError(f"MCP server {self.server!r}: headers go to HTTP servers only, not to stdio")
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in self.headers.items()):
            raise ConfigurationError(f"MCP headers must map names to strings, got {self.headers!r}")
        limit = self.max_connections
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 2):
            raise ConfigurationError(
                f"MCP max_connections must be a whole number of at least 2, or None, got {limit!r}"
            )
        if not isinstance(self.required, bool):
            raise ConfigurationError(f"MCP required must be true or false, got {self.required!r}")
        if not isinstance(self.timeout, int | float) or isinstance(self.timeout, bool) or not self.timeout > 0:
            raise ConfigurationError(f"MCP timeout must be a number of seconds above 0, got {self.timeout!r}")
        if self.prefix is not None and not re.fullmatch(r"[a-zA-Z0-9_-]+", self.prefix):
            raise ConfigurationError(f"MCP prefix must be letters, digits, '_' or '-', got {self.prefix!r}")

    def __repr__(self) -> str:
        return f"MCPTools({self.label!r}, prefix={self.prefix!r})"

    # Each hook is its own session: not equal by ServerTools' dataclass fields, which two servers may share.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    # Lifecycle ---------------------------------------------------------------------------------------------------

    async def async_startup(self) -> None:
        """Open the session and fetch the tools; a server that is down is a warning, or a failure if `required`."""
        if self._runner is not None:
            return
        self._events()
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._keep_open(first), name=f"MCP session {self.label}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                await asyncio.shield(first)
        except Exception as error:
            first.cancel()  # a later outcome of this attempt goes unread
            reason = _reason(error)
            if self.required:
                await self.async_shutdown()
                raise ConnectionError(f"MCP server {self.label} is unreachable: {reason}") from None
            logger.warning(
                "MCP server %s is unreachable (%s): its tools are left out until it answers", self.label, reason
            )

    async def async_shutdown(self) -> None:
        """Close the session (and end a stdio server's process)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            # Ended from inside, not cancelled: the SDK's stdio client stops its process only on a clean exit.
            self._closing = True
            self._dropped.set()
            self._wake.set()
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await asyncio.shield(runner)
            except TimeoutError:
                await cancel_and_wait(runner)
        self.replace_tools(())

    async def _keep_open(self, first: asyncio.Future[None]) -> None:
        """Keep one session open: connect, serve until it drops, wait (doubling), connect again."""
        delay = FIRST_RETRY
        while not self._closing:
            self._wake.clear()
            attempt, self._outcome = self._outcome, None  # the calls waiting before this attempt began
            try:
                async with self._open() as client:
                    await self._refresh(client)
                    self._session_gone = False
                    self._client = client
                    self._dropped.clear()
                    self._connected.set()
                    self._settle(attempt, True)
                    self._settle(self._outcome, True)
                    if not first.done():
                        first.set_result(None)
                    elif delay > FIRST_RETRY:
                        logger.warning("MCP server %s: reconnected", self.label)
                    delay = FIRST_RETRY
                    await self._serve(client)
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
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self.headers,
                        timeout=httpx2.Timeout(self.timeout, read=None),  # a call waits for a connection
                        limits=httpx2.Limits(max_connections=self.max_connections),  # no longer than `timeout`
                        event_hooks={"request": [self._add_forwarded], "response": [self._watch_session]},
                    )
                )
                transport: Any = streamable_http_client(self.server, http_client=http)
            else:
                command = [sys.executable if self.server[0] == "python" else self.server[0], *self.server[1:]]
                transport = stdio_client(StdioServerParameters(command=command[0], args=command[1:]))
            async with asyncio.timeout(self.connect_timeout):
                client = await stack.enter_async_context(
                    Client(transport, mode=self.mode, message_handler=self._on_message, cache=None)
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
        self._dropped.set()

    async def _on_message(self, message: Any) -> None:
        """Notifications of an older server: a changed tool list; a transport failure drops the session."""
        if isinstance(message, Exception):
            logger.debug("MCP server %s: transport error: %r", self.label, message)
            self._dropped.set()
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            client = self._client
            if client is not None:
                self._refreshing = asyncio.ensure_future(self._refresh(client))

    # Tools -------------------------------------------------------------------------------------------------------

    async def _refresh(self, client: Client) -> None:
        """Fetch the tool list (every page) and serve the allowed tools under their model names."""
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        names = {tool.name for tool in listed}
        for wanted in self.allowed_tools or ():
            if not any(fnmatch.fnmatchcase(name, wanted) for name in names):
                logger.warning("MCP server %s: allowed tool %r matches none of its tools", self.label, wanted)
        served: dict[str, tuple[str, ServerTool]] = {}
        for tool in listed:
            if not self._allowed(tool.name):
                continue
            declared = self._declared(tool)
            if declared.name in served:  # `get.user` and `get_user`, or two long names cut at 64 characters
                first = served[declared.name][0]
                logger.warning(
                    "MCP server %s: tools %r and %r would both be declared as %r: %r is served, %r left out "
                    "(deny one of them, or give it another name on the server)",
                    *(self.label, first, tool.name, declared.name, first, tool.name),
                )
                continue
            served[declared.name] = (tool.name, declared)
        self.replace_tools(declared for _, declared in served.values())
        logger.info("MCP server %s: serving %s", self.label, ", ".join(self.by_name) or "no tools")

    def _allowed(self, name: str) -> bool:
        if self.allowed_tools is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.allowed_tools):
            return False
        return not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.denied_tools)

    def _declared(self, tool: mcp_types.Tool) -> ServerTool:
        name = _TOOL_NAME.sub("_", f"{self.prefix}_{tool.name}" if self.prefix else tool.name)[:64]

        async def call(**arguments: Any) -> ToolResult:
            return await self._call(tool.name, name, arguments)

        schema = portable(tool.input_schema) if isinstance(tool.input_schema, dict) else {"type": "object"}
        return ServerTool(name, tool.description or tool.title or "", schema, call)

    async def _call(self, tool: str, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One call; a dropped session is reopened and the call made once more (the caller bounds the time).

        A call waits for no more than one attempt to reconnect: a server that is down fails it at once, and a
        session that drops while the call runs ends the call, rather than both waiting out the timeout.
        """
        failure: object = "the session dropped"
        for _ in range(2):
            client = self._client
            if client is None:
                if self._outcome is None:
                    self._outcome = asyncio.get_running_loop().create_future()
                outcome = self._outcome
                self._wake.set()
                if self._runner is None or not await asyncio.shield(outcome):
                    failure = "it did not answer the reconnection"
                    break
                client = self._client
                if client is None:
                    continue
            try:
                result = await self._unless_dropped(client.call_tool(tool, arguments))
            except MCPError as error:
                if error.code != mcp_types.CONNECTION_CLOSED and not self._session_gone:
                    return ToolResult(f"{name} failed: {error.error.message}", True)
                failure = error
            except (httpx2.TransportError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError) as error:
                failure = error
            else:
                if result is not None:
                    return tool_result(result)
            if self._client is client:
                self._dropped.set()  # the session is gone: reopen it, and wait for it on the next turn
                self._client = None
                self._connected.clear()
        return ToolResult(f"{name} failed: the MCP server is unreachable ({failure})", True)

    async def _unless_dropped(self, call: Coroutine[Any, Any, Any]) -> Any:
        """The call's result, or None when the session drops first (over HTTP the SDK would wait on)."""
        calling = asyncio.ensure_future(call)
        dropped = asyncio.ensure_future(self._dropped.wait())
        try:
            await asyncio.wait((calling, dropped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            dropped.cancel()
            if not calling.done():
                await cancel_and_wait(calling)
        return None if calling.cancelled() else calling.result()

    # Forwarded headers -------------------------------------------------------------------------------------------

    async def _plan(self, claim: Any, messages: Any, response: Any, logging_obj: Any, kwargs: Any) -> Any:
        """With `forward_headers`, the client's headers are bound to this request's calls."""
        if not self.forward_headers:
            return await super()._plan(claim, messages, response, logging_obj, kwargs)
        scope = kwargs.get("scope") or {}
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers") or ()
            if name.decode("latin-1").lower() in self.forward_headers
        }
        token = self._forwarded.set(headers)
        try:
            return await super()._plan(claim, messages, response, logging_obj, kwargs)
        finally:
            self._forwarded.reset(token)

    async def _watch_session(self, response: httpx2.Response) -> None:
        """A 404 to a request that carries the session id means the server ended the session (a restart, an
        expiry): the spec says to open a new one, so the call that got it is made again on a new session."""
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            self._session_gone = True
            self._dropped.set()

    async def _add_forwarded(self, request: httpx2.Request) -> None:
        """The SDK sends each call from a task that carries the caller's context, so the call's headers are here."""
        headers = self._forwarded.get()
        if headers:
            request.headers.update(headers)


def _names(names: str | Iterable[str], option: str) -> tuple[str, ...]:
    """A list of names, where one string is one name (not its characters)."""
    listed = (names,) if isinstance(names, str) else tuple(names)
    if not all(isinstance(name, str) and name for name in listed):
        raise ConfigurationError(f"MCP {option} must be a name or a list of names, got {names!r}")
    return listed


def _reason(error: BaseException) -> str:
    """What went wrong, from the first leaf of the exception groups anyio raises."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def tool_result(result: Any) -> ToolResult:
    """An MCP `CallToolResult` as the model reads it: text joined, structured content as JSON, images as images,
    resources by their URI, `isError` as an error result."""
    texts: list[str] = []
    images: list[Image] = []
    structured = getattr(result, "structured_content", None)
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            if structured is not None and _same_json(block.text, structured) and not _wraps(structured, [block.text]):
                continue  # the SDKs repeat structured content as text: once is enough
            texts.append(block.text)
        elif kind == "image":
            images.append(Image(block.mime_type, block.data))
        elif kind == "audio":
            texts.append(f"[audio {block.mime_type}: not shown]")
        elif kind == "resource_link":
            texts.append(f"[resource {block.uri}{f': {block.name}' if block.name else ''}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            texts.append(f"[resource {resource.uri}]\n{text}" if text is not None else f"[resource {resource.uri}]")
    if structured is not None and not _wraps(structured, texts):
        texts.insert(0, orjson.dumps(structured).decode())
    return ToolResult("\n".join(texts), bool(getattr(result, "is_error", False)), tuple(images))


def _wraps(structured: Any, texts: list[str]) -> bool:
    """Whether structured content is the SDKs' `{"result": value}` wrapping of a plain value the text gives."""
    if not (isinstance(structured, dict) and len(structured) == 1 and "result" in structured):
        return False
    value = structured["result"]
    return any(text == value or _same_json(text, value) for text in texts)


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(orjson.loads(text) == value)
    except orjson.JSONDecodeError:
        return False


def from_config(entries: object, where: str) -> tuple[MCPTools, ...]:
    """The hooks a YAML `mcp_servers` list describes: each entry has `url` or `command`, and MCPTools' options."""
    if not isinstance(entries, list):
        raise ConfigurationError(f"{where} must be a list of servers, got {entries!r}")
    options = {
        *("prefix", "allowed_tools", "denied_tools", "timeout", "headers", "forward_headers", "required"),
        "max_connections",
    }
    hooks = []
    for number, entry in enumerate(entries):
        at = f"{where}[{number}]"
        if not isinstance(entry, dict) or ("url" in entry) == ("command" in entry):
            raise ConfigurationError(f"{at} must be a mapping with either `url` or `command`, got {entry!r}")
        unknown = sorted(set(entry) - options - {"url", "command"})
        if unknown:
            raise ConfigurationError(
                f"{at}: unknown option {unknown} (known: url, command, {', '.join(sorted(options))})"
            )
        server = entry["url"] if "url" in entry else entry["command"]
        settings = {name: value for name, value in entry.items() if name in options}
        if isinstance(settings.get("timeout"), str):
            with contextlib.suppress(ValueError):
                settings["timeout"] = float(settings["timeout"])
        try:
            hooks.append(MCPTools(server, **settings))
        except ConfigurationError as error:
            raise ConfigurationError(f"{at}: {error}") from None
        except TypeError as error:
            raise ConfigurationError(f"{at}: {error}") from None
    return tuple(hooks)
