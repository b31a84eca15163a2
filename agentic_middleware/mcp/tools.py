"""`MCPTools`: an MCP server's tools declared to the model, its calls run over the server's one session.

Its options, the tool list as the model sees it, and the headers forwarded with each call are here; the session is
connection.py's (connecting, reconnecting) and session.py's (calling), and what a result becomes is results.py's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from starlette.types import Scope

from ..declare import ServerTool
from ..errors import ConfigurationError
from ..native import NativeOptions
from ..policy import matches, names_of
from ..schema import portable
from ..surfaces import ToolResult
from ..tools import ServerTools
from .results import tool_result
from .session import CallFailed, Session, reason

logger = logging.getLogger("agentic_middleware")

MAX_RESULT_BYTES = 32 * 1024 * 1024  # Anthropic's API takes requests of 32 MB at most: a larger result fits no rerun
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
    flight holds one, the change stream one more; None for no bound). `max_result_bytes` bounds the server's
    answer to one call (its JSON): a larger one is that call's error result, over HTTP refused before it is read.
    `declare_in_side_requests` declares the tools into side requests too (a title, a summary: side.py).
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
        max_result_bytes: int = MAX_RESULT_BYTES,
        declare_in_side_requests: bool = False,
    ) -> None:
        super().__init__(tools=(), timeout=timeout, declare_in_side_requests=declare_in_side_requests)
        self.server = server
        self.prefix = prefix
        self.allowed_tools = None if allowed_tools is None else _names(allowed_tools, "allowed_tools")
        self.denied_tools = _names(denied_tools, "denied_tools")
        self.headers = dict(headers or {})
        self.forward_headers = tuple(name.lower() for name in _names(forward_headers, "forward_headers"))
        self.required = required
        self.max_connections = max_connections
        self.max_result_bytes = max_result_bytes
        self._check()
        self.connect_timeout = max(timeout, MIN_CONNECT_TIMEOUT)
        self.label = server if isinstance(server, str) else " ".join(server)
        self._withheld: tuple[str, ...] = ()  # tool names another hook of the middleware serves (`_refresh`)
        self._forwarded: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
            "forwarded", default=None
        )
        self.session = Session(
            server,
            label=self.label,
            timeout=timeout,
            connect_timeout=self.connect_timeout,
            headers=self.headers,
            max_connections=max_connections,
            max_result_bytes=max_result_bytes,
            mode=self.mode,
            refresh=self._refresh,
            on_request=self._add_forwarded,
        )

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
        size = self.max_result_bytes
        if not isinstance(size, int) or isinstance(size, bool) or size < 1024:
            raise ConfigurationError(f"MCP max_result_bytes must be a whole number of at least 1024, got {size!r}")
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
        try:
            await self.session.start()
        except Exception as error:
            cause = reason(error)
            if self.required:
                await self.async_shutdown()
                raise ConnectionError(f"MCP server {self.label} is unreachable: {cause}") from None
            logger.warning(
                "MCP server %s is unreachable (%s): its tools are left out until it answers", self.label, cause
            )

    async def async_shutdown(self) -> None:
        """Close the session (and end a stdio server's process)."""
        await self.session.close()
        self.replace_tools(())

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
            if not any(matches(name, (wanted,)) for name in names):
                logger.warning("MCP server %s: allowed tool %r matches none of its tools", self.label, wanted)
        served: dict[str, tuple[str, ServerTool]] = {}
        for tool in listed:
            if not self._allowed(tool.name):
                continue
            if _needs_task(tool):
                logger.warning(
                    "MCP server %s: tool %r runs only as an MCP task (execution.taskSupport: required), which "
                    "MCPTools does not run: left out",
                    *(self.label, tool.name),
                )
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
        taken = {name: peer for peer in self.peers if peer is not self for name in peer.by_name}
        self._withheld = tuple(name for name in served if name in taken)
        for name in self._withheld:  # a tool the server added since the start's check: another hook serves it
            logger.warning(
                "MCP server %s: tool %r is left out: %s serves one of that name (give one of them a `prefix`)",
                *(self.label, name, _who(taken[name])),
            )
            del served[name]
        self.replace_tools(declared for _, declared in served.values())
        logger.info("MCP server %s: serving %s", self.label, ", ".join(self.by_name) or "no tools")

    def declared_tool_names(self) -> list[str]:
        """The names served, and those left out because another hook serves them: the start refuses such a clash
        (lifespan.py); one that appears later leaves the newcomer's tool out, so the model never sees a name twice."""
        return [*self.by_name, *self._withheld]

    def _allowed(self, name: str) -> bool:
        if self.allowed_tools is not None and not matches(name, self.allowed_tools):
            return False
        return not matches(name, self.denied_tools)

    def _declared(self, tool: mcp_types.Tool) -> ServerTool:
        name = _TOOL_NAME.sub("_", f"{self.prefix}_{tool.name}" if self.prefix else tool.name)[:64]

        async def call(**arguments: Any) -> ToolResult:
            return await self._call(tool.name, name, arguments)

        schema = portable(tool.input_schema) if isinstance(tool.input_schema, dict) else {"type": "object"}
        return ServerTool(name, tool.description or tool.title or "", schema, call)

    async def _call(self, tool: str, name: str, arguments: dict[str, Any]) -> ToolResult:
        try:
            return tool_result(await self.session.call(tool, arguments))
        except CallFailed as failure:
            return ToolResult(f"{name} failed: {failure}", True)

    # Forwarded headers -------------------------------------------------------------------------------------------

    async def run_tool(
        self, tool: ServerTool, arguments: Any, logging_obj: Any, scope: Scope, native: NativeOptions | None = None
    ) -> ToolResult:
        """With `forward_headers`, the client's headers go with this call, whichever hook planned the round.

        The SDK gives no way to set headers on one call, so they travel in a context variable the HTTP client's
        request hook reads (`_add_forwarded`): set here, around this one call, in the task that makes it.
        """
        if not self.forward_headers:
            return await super().run_tool(tool, arguments, logging_obj, scope, native)
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope.get("headers") or ()
            if name.decode("latin-1").lower() in self.forward_headers
        ]  # every line, in the client's order: a header sent twice goes twice, as the server would read the client
        token = self._forwarded.set(headers)
        try:
            return await super().run_tool(tool, arguments, logging_obj, scope, native)
        finally:
            self._forwarded.reset(token)

    async def _add_forwarded(self, request: httpx2.Request) -> None:
        """The SDK sends each call from a task that carries the caller's context, so the call's headers are here."""
        headers = self._forwarded.get()
        if headers:
            names = {name.lower() for name, _ in headers}  # the client's lines replace the static ones of the name
            kept = [(name, value) for name, value in request.headers.multi_items() if name.lower() not in names]
            request.headers = httpx2.Headers([*kept, *headers])


def _who(hook: ServerTools) -> str:
    """A hook as the clash messages name it: its class, and for an MCP server which one."""
    label = getattr(hook, "label", None)
    return f"{type(hook).__name__} ({label})" if isinstance(label, str) else type(hook).__name__


def _needs_task(tool: mcp_types.Tool) -> bool:
    """Whether a call must be made as a task (2025-11-25's `execution.taskSupport`): a plain call gets -32601."""
    execution = getattr(tool, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def _names(names: str | Iterable[str], option: str) -> tuple[str, ...]:
    """A list of names, where one string is one name (not its characters)."""
    return names_of(names, option, "MCP") or ()


def from_config(entries: object, where: str) -> tuple[MCPTools, ...]:
    """The hooks a YAML `mcp_servers` list describes: each entry has `url` or `command`, and MCPTools' options."""
    if not isinstance(entries, list):
        raise ConfigurationError(f"{where} must be a list of servers, got {entries!r}")
    options = {
        *("prefix", "allowed_tools", "denied_tools", "timeout", "headers", "forward_headers", "required"),
        *("max_connections", "max_result_bytes", "declare_in_side_requests"),
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
