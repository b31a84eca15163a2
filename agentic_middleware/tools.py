"""Server tools in a few lines: declare functions as tools, and one hook serves them on every route.

A tool's declaration and its one run are declare.py's; this module is the hook, `ServerTools`, and how the hooks of
one middleware serve each other's calls (`share_tools`).

@server_tool(description="Search the web.")
async def web_search(query: str) -> str: ...

app.add_middleware(AgenticLoopMiddleware, hooks=[ServerTools([web_search])])
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope

from .declare import ServerTool, as_server_tool, server_tool, warn_long_descriptions
from .errors import ConfigurationError, RequestRefused
from .hooks import AgenticHook, AgenticLoopPlan, AgenticLoopRequestPatch
from .native import (
    MAX_USES_EXCEEDED,
    RECORDED,
    UNAVAILABLE,
    NativeCall,
    NativeOptions,
    NativeRequest,
    NativeRound,
    NativeRun,
    domains,
    query_of,
)
from .native.live import LiveRecords
from .schema import fitted
from .side import side_request
from .surfaces import Surface, ToolResult, surface_for

__all__ = ["ServerTool", "ServerTools", "server_tool", "share_tools"]  # the declarations as before, from here too

logger = logging.getLogger("agentic_middleware")

_Run = tuple[ToolResult, NativeRun | None]  # one call's result, and its native record if any

TRACE_FIELD = "server_tool_calls"
NATIVE_FIELD = "native_round"  # a plan's record of the round's native calls (see native/)


@dataclass
class ServerTools(AgenticHook):
    """A hook that declares its tools to the model, runs the model's calls to them, and reruns with the results.

    `native` maps a client-declared native tool to one of ours by its `type` (or the type's prefix before the
    date): `{"web_search": "web_search"}` turns Anthropic's `{"type": "web_search_20250305", ...}`, and OpenAI
    Responses' `{"type": "web_search"}` and `{"type": "web_search_preview"}`, into our `web_search` function tool;
    the client then gets the provider's own record of each call (see native/ and docs/native-tools.md).
    `tools` are `@server_tool` declarations or plain functions, which are declared as `@server_tool` would.
    `timeout` bounds each call unless the tool sets its own; `keep_trace` adds to the final response a
    `server_tool_calls` list of what ran. A side request (a title, a token count, a summary: side.py) gets none of
    our tools but those the client declared itself, unless `declare_in_side_requests`.
    """

    tools: Iterable[ServerTool | Callable[..., Any]]
    native: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    keep_trace: bool = False
    declare_in_side_requests: bool = False
    # Streaming clients get the loop too, live (see the middleware's `streaming`): native records go out as each
    # search completes (native/live.py).
    agentic_loop_streaming: bool | str | Callable[[dict[str, Any]], Any] = True

    def __post_init__(self) -> None:
        if not isinstance(self.declare_in_side_requests, bool):  # YAML's "no" is a string, and true
            raise ConfigurationError(
                f"declare_in_side_requests must be true or false, got {self.declare_in_side_requests!r}"
            )
        tools = [as_server_tool(tool) for tool in self.tools]
        self.by_name: dict[str, ServerTool] = {tool.name: tool for tool in tools}
        warn_long_descriptions(tools)
        if len(self.by_name) < len(tools):
            names = [tool.name for tool in tools]
            raise ConfigurationError(f"two server tools are named {next(n for n in names if names.count(n) > 1)!r}")
        self.peers: tuple[ServerTools, ...] = (self,)  # the middleware's ServerTools-family hooks (`share_tools`)
        unknown = sorted(set(self.native.values()) - set(self.by_name))
        if unknown:
            raise ConfigurationError(f"native maps to tools that are not served: {unknown}")
        unrecorded = sorted(set(self.native) - RECORDED)
        if unrecorded:  # a fetch shown as a search would be a false record, and lose the page on the next turn
            supported = sorted(RECORDED)
            raise ConfigurationError(f"native tools without a record format: {unrecorded} (supported: {supported})")
        if self.native:  # the domain filters read URLs as a browser does: without the parser, fail at start
            domains.require()

    def declared_tool_names(self) -> list[str]:
        """The names this hook declares now; the middleware refuses two hooks that declare the same one."""
        return list(self.by_name)

    def replace_tools(self, tools: Iterable[ServerTool]) -> None:
        """Serve these tools from now on: for tool sources that change while serving, such as an MCP server.

        Requests already running keep the tools they were given; a call to a tool gone since reads as an error.
        """
        self.by_name = {tool.name: tool for tool in tools}
        warn_long_descriptions(self.by_name.values())

    def _native_target(self, tool: Any) -> str | None:
        if not self.native:  # most hooks map none: a client's twenty tools are not each looked at for one
            return None
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            return None
        return next(
            (name for prefix, name in self.native.items() if kind == prefix or kind.startswith(f"{prefix}_")), None
        )

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Declare our tools; a client tool of the same name, or a native tool mapped to one, gives way to ours.

        The native tools the client declared are kept for the request's rounds, and the records of earlier turns'
        native calls in its history are turned back into the app's own calls and results.
        """
        surface = surface_for(kwargs["_agentic_loop_api_surface"])
        native = surface.native_format() if self.native else None
        original = request
        client_tools = request.get("tools")
        kept = []
        declared: dict[str, NativeOptions] = {}
        renamed: dict[str, str] = {}  # a native tool's declared name and type -> the served tool's name
        cached: dict[str, Any] = {}  # the served tool's name -> the native declaration's `cache_control`
        given = client_tools if isinstance(client_tools, list) else []
        named: set[str] = set()  # our tools the client declared too (by name), which a side request keeps
        listed = [(f"tools[{n}]", tool) for n, tool in enumerate(given)]
        for where, tool in [*listed, *(native.declared(request) if native else ())]:
            target = self._native_target(tool)
            if target is not None:
                if target in declared:  # whose filters would hold is not ours to pick: the first's could be none
                    raise RequestRefused(
                        f"{where} declares the native tool {target!r} again: declare it once", param=where
                    )
                declared[target] = NativeOptions.read(tool, where)  # a malformed one: 400 (RequestRefused)
                renamed.update({key: target for key in (tool.get("name"), tool.get("type")) if isinstance(key, str)})
                if "cache_control" in tool:
                    cached[target] = tool["cache_control"]
            elif (name := surface.declared_name(tool)) not in self.by_name:
                kept.append(tool)
            else:
                named.add(name)
        if declared:
            NativeRequest(declared).keep(logging_obj)
        if native is not None:
            request = native.request(request, self.native)
            if renamed:
                request = native.served(request, renamed)
        served = list(self.by_name.values())
        side = None if self.declare_in_side_requests else side_request(surface.name, request, kwargs.get("scope"))
        if side is not None:
            served = [tool for tool in served if tool.name in named or tool.name in declared]
            logger.debug("a side request (%s): %d of %d server tools declared", side, len(served), len(self.by_name))
        if not served and not isinstance(client_tools, list):  # nothing to declare: no `tools` added
            return None if request is original else request
        limit = surface.max_description
        ours = [surface.tool_definition(t.name, fitted(t.description, limit), t.input_schema) for t in served]
        if cached:  # a prompt-caching breakpoint on the native declaration stays on the tool that serves it
            ours = [
                {**tool, "cache_control": cached[t.name]} if t.name in cached else tool
                for tool, t in zip(ours, served, strict=True)
            ]
        return {**request, "tools": [*kept, *ours]}

    def _owner(self, name: str | None) -> ServerTools | None:
        """The hook of this middleware that serves the tool `name` now, if any (a loop, not a generator: asked for
        every call of every round, and a generator is an object of its own each time). A call without one name
        (`tool_name`) has none: no server tool runs a call that a check could read as another's."""
        for peer in self.peers:
            if name in peer.by_name:
                return peer
        return None

    def _claimed(self, surface: Surface, response: Any) -> list[dict[str, Any]]:
        """Our calls in the first alternative answer that has any: one conversation goes on (chat's `n` > 1)."""
        for group in surface.call_groups(response):
            ours = [call for call in group if self._owner(surface.call_name(call)) is not None]
            if ours:
                return ours
        return []

    async def async_should_run_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        calls = self._claimed(surface_for(kwargs["_agentic_loop_api_surface"]), response)
        return (True, {"tool_calls": calls}) if calls else (False, {})

    async def _plan(
        self, claim: dict[str, Any], messages: list[Any], response: Any, logging_obj: Any, kwargs: dict[str, Any]
    ) -> AgenticLoopPlan:
        """Run every claimed call concurrently, then rerun with the assistant turn and the results.

        The claimed calls are those of every ServerTools-family hook of the middleware (`share_tools`), each run
        by the hook that serves it under that hook's timeout: one turn's calls to several servers make one round.

        Calls to the client's own tools in the same turn are left out of it: the model is asked again with our
        results and calls the client's tool again if it still needs it, so the client only ever sees its own.
        """
        surface = surface_for(kwargs["_agentic_loop_api_surface"])
        calls = claim["tool_calls"]
        native = NativeRequest.of(logging_obj)
        searches = (
            [self._native_call(surface, call, native) for call in calls] if native is not None else [None] * len(calls)
        )
        scope: Scope = kwargs.get("scope") or {}  # the client's request (absent when not called by the middleware)
        jobs = [
            self._run(surface, call, search, logging_obj, scope, native)
            for call, search in zip(calls, searches, strict=True)
        ]
        live = LiveRecords.of(logging_obj) if native is not None else None  # records go out as each search ends
        runs, streamed = await live.run(jobs, searches) if live is not None else (await _all(jobs), False)
        results = [result for result, _ in runs]
        follow_up = [*messages, *surface.follow_up(response, calls, results)]
        metadata: dict[str, Any] = {}
        if any(peer.keep_trace for peer in self.peers):  # only then read (the post hook): a live stream keeps its plan
            metadata[TRACE_FIELD] = [
                {"name": surface.call_name(call), "input": surface.call_input(call), "is_error": result.is_error}
                for call, result in zip(calls, results, strict=True)
            ]
        if recorded := tuple(run for _, run in runs if run is not None):
            metadata[NATIVE_FIELD] = NativeRound(response, recorded, streamed)
        return AgenticLoopPlan(
            run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=follow_up), metadata=metadata
        )

    async def run_tool(
        self, tool: ServerTool, arguments: Any, logging_obj: Any, scope: Scope, native: NativeOptions | None = None
    ) -> ToolResult:
        """One call of a tool this hook serves, under this hook's settings, for the client request `scope`.

        Whichever hook of the middleware plans a round, each call is run here, by the hook that serves its tool:
        so a setting of that hook (its timeout; an MCP server's forwarded headers) holds for every call of it.
        """
        return await tool(arguments, self.timeout, logging_obj, native)

    @staticmethod
    def _native_call(surface: Surface, call: dict[str, Any], native: NativeRequest | None) -> NativeCall | None:
        """The call as a native one, when the client declared its tool natively."""
        name = surface.call_name(call)
        options = native.declared.get(name) if native is not None and name is not None else None
        if options is None:
            return None
        return NativeCall(call, str(options.declared.get("name") or name), query_of(surface.call_input(call)))

    async def _run(
        self,
        surface: Surface,
        call: dict[str, Any],
        search: NativeCall | None,
        logging_obj: Any,
        scope: Scope,
        native: NativeRequest | None,
    ) -> tuple[ToolResult, NativeRun | None]:
        """One call's result, and its native record when the client declared the tool natively (`search`)."""
        name = surface.call_name(call)
        owner = self._owner(name)
        tool = owner.by_name.get(name) if owner is not None and name is not None else None
        if owner is None or tool is None or name is None:
            gone = ToolResult(f"{name} is no longer served", True)
            return gone, search.ran(gone, UNAVAILABLE) if search is not None else None
        if search is None or native is None:
            return await owner.run_tool(tool, surface.call_input(call), logging_obj, scope), None
        options = native.declared[name]
        if not native.take(name):
            exceeded = native.exceeded(name, options)
            return exceeded, search.ran(exceeded, MAX_USES_EXCEEDED)
        result = await owner.run_tool(tool, surface.call_input(call), logging_obj, scope, options)
        result = native.restricted(result, options, search.query)
        return result, search.ran(result, UNAVAILABLE if result.is_error else None)

    async def async_build_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        anthropic_messages_provider_config: Any,
        anthropic_messages_optional_request_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return await self._plan(tools, messages, response, logging_obj, kwargs)

    async def async_build_chat_completion_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        optional_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return await self._plan(tools, messages, response, logging_obj, kwargs)

    async def async_build_responses_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        optional_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return await self._plan(tools, messages, response, logging_obj, kwargs)

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
        """The round's native record, and with `keep_trace` what ran; post hooks run innermost first, so earlier
        rounds go in front."""
        if not isinstance(response, dict):
            return response
        recorded = plan.metadata.get(NATIVE_FIELD)
        native = surface_for(kwargs["_agentic_loop_api_surface"]).native_format() if recorded else None
        if native is not None:
            response = native.record(response, recorded)
        trace = plan.metadata.get(TRACE_FIELD)
        if trace is None:
            return response
        return {**response, TRACE_FIELD: [*trace, *(response.get(TRACE_FIELD) or [])]}


async def _all(jobs: list[Coroutine[Any, Any, _Run]]) -> list[_Run]:
    """Every call's run, concurrently. One call (most rounds) is awaited in the request's own task, as the hooks'
    methods are, without a task and a gather of its own: their pause cost a stream's loop a tenth of its CPU in
    process (benchmarks case 12). As in a gather, a cancellation of the request that the tool swallowed (a timeout,
    the client leaving) is raised once it returns."""
    if len(jobs) != 1:
        return list(await asyncio.gather(*jobs))
    task = asyncio.current_task()
    cancelling = task.cancelling() if task is not None else 0
    run = await jobs[0]
    if task is not None and task.cancelling() > cancelling:
        raise asyncio.CancelledError
    return [run]


def share_tools(hooks: Iterable[object]) -> None:
    """Make the ServerTools-family hooks of one middleware serve each other's calls.

    The loop lets the first hook that acts decide a round. Were each of these hooks to claim only its own calls,
    a turn calling tools of several (say, several MCP servers) would run one hook's calls and drop or defer the
    rest; instead whichever acts first runs them all, concurrently, and reruns once.
    """
    family = tuple(hook for hook in hooks if isinstance(hook, ServerTools))
    for hook in family:
        hook.peers = family
    warn_nested_prefixes(getattr(hook, "prefix", None) for hook in family)


def warn_nested_prefixes(prefixes: Iterable[object]) -> None:
    """Warn of MCP prefixes one of which is another's and `_` (`docs`, `docs_admin`): a tool policy's pattern for
    the one server's tools (`docs_*`) matches the other's too, as a name cannot tell where a prefix ends."""
    named = sorted({prefix for prefix in prefixes if isinstance(prefix, str) and prefix})
    for outer in named:
        for inner in named:
            if inner.startswith(f"{outer}_"):
                logger.warning(
                    "MCP prefixes %r and %r nest: a tool policy pattern %r matches the tools of both; "
                    "name %r's tools one by one, or give the servers prefixes neither of which begins the other",
                    outer,
                    inner,
                    f"{outer}_*",
                    outer,
                )
