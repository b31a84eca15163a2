"""The ASGI entry: which requests take part in the loop; everything else passes through untouched."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from .admission import may_loop, read_policy, refuse, socket, started, stream_mode, stream_wishes, wrong_type
from .asgi import read_body, replay, scope_unencoded, scope_with_body_length
from .callers import Caller
from .chains import ChainStore, chains_of, hooks_store
from .config import Settings, load_config, merged, resolve_hooks, warn_if_litellm_runs
from .counting import COUNT_ENDPOINTS, count, tool_hooks
from .ends import has_internal_fields, is_internal_field
from .followups import CONTEXT_ENDPOINTS, beside
from .hooks import BoundHook
from .lifespan import HookLifecycle
from .loop import AgenticLoop
from .loop_setup import LoopSetup
from .methods import judged_method, model_route
from .observe import Observer, RoundCallback
from .payload import TOO_DEEP, own_size, too_deep
from .policy import PROMPT_REFUSED, PolicyFunction, client_own, scoped, served_families, stored_prompt
from .precall import has_pre_call
from .routes import judged_path, warn_uncovered
from .shown import ShownIds
from .surfaces import Surface, surfaces
from .tools import share_tools

logger = logging.getLogger("agentic_middleware")


class AgenticLoopMiddleware:
    """Runs server-side tool loops for JSON requests on the model routes, streaming ones included (`stream_mode`).

    `hooks` (instances or dotted paths) are asked about every whole answer, in
    order. `config` is a YAML file (or settings from `load_config`); options given
    here win over it, and `hooks` given here replace its callbacks. `chain_store` keeps what a follow-up by
    `previous_response_id` needs after a Responses turn whose id names an incomplete stored response (chains.py):
    in this process by default, a `ChainStore` shared by replicas, or False for none. `caller(scope)` (sync or async,
    or a dotted path) says who is calling, so that its records serve that caller alone (callers.py).
    `tool_policy(scope)` (sync or async, or a dotted path) says which server tools the request may use and caps its
    loop limit (policy.py): a `ToolPolicy`, or None for everything.
    """

    def __init__(
        self,
        app: ASGIApp,
        hooks: Iterable[object] | None = None,
        *,
        config: str | os.PathLike[str] | Settings | None = None,
        routes: Mapping[str, str] | str | None = None,
        max_agentic_loops: int | None = None,
        custom_llm_provider: str | Mapping[str, str] | None = None,
        sum_usage: bool | None = None,
        log_bodies: bool | None = None,
        tracing: bool | None = None,
        on_round: RoundCallback | str | None = None,
        max_body_bytes: int | None = None,
        app_timeout: float | None = None,
        hook_timeout: float | None = None,
        loop_timeout: float | None = None,
        error_details: bool | None = None,
        streaming: bool | str | None = None,
        stream_keepalive: float | None = None,
        rerun_retries: int | None = None,
        closing: str | None = None,
        closing_text: str | None = None,
        internal_headers: Mapping[str, str] | None = None,
        gates_see_stream: bool | None = None,
        chain_store: ChainStore | bool | None = None,
        caller: Caller | str | None = None,
        tool_policy: PolicyFunction | str | None = None,
    ) -> None:
        self.app = app
        settings = config if isinstance(config, Settings) else load_config(config) if config else Settings()
        self.settings = merged(
            settings,
            hooks=None if hooks is None else resolve_hooks(hooks, "hooks"),
            routes=routes,
            max_agentic_loops=max_agentic_loops,
            custom_llm_provider=custom_llm_provider,
            sum_usage=sum_usage,
            log_bodies=log_bodies,
            tracing=tracing,
            on_round=on_round,
            max_body_bytes=max_body_bytes,
            app_timeout=app_timeout,
            hook_timeout=hook_timeout,
            loop_timeout=loop_timeout,
            error_details=error_details,
            streaming=streaming,
            stream_keepalive=stream_keepalive,
            rerun_retries=rerun_retries,
            closing=closing,
            closing_text=closing_text,
            internal_headers=internal_headers,
            gates_see_stream=gates_see_stream,
            caller=caller,
            tool_policy=tool_policy,
        )
        self.hooks = tuple(BoundHook(hook) for hook in self.settings.hooks)
        self.served = served_families(self.settings.hooks)  # a search served as `find` is judged as `web_search` too
        share_tools(self.settings.hooks)
        self.lifecycle = HookLifecycle(self.hooks)
        self.tool_hooks = tool_hooks(self.hooks)  # they declare into token counts too (counting.py)
        self.chains = chains_of(
            chain_store if chain_store is not None else self.settings.chain_store, self.settings.caller
        )
        self.setup = LoopSetup(
            app,
            self.hooks,
            self.settings,
            Observer(self.settings.on_round, self.settings.tracing, self.settings.log_bodies),
            self.chains,
            hooks_store(self.chains),
        )
        table = self.settings.route_table()
        self.routes = table.exact  # the hot path: one dict lookup
        self.templated = table if table.templates else None
        self.providers = {surface.name: self.settings.provider(surface) for surface in surfaces().values()}
        warn_uncovered(app, table)
        self.stream_wishes = stream_wishes(self.hooks)
        # With a guardrail or a pre-call hook mounted, a request on a route they judge never reaches the app unseen.
        self.guarded = any(has_pre_call(hook) for hook in self.hooks)
        # With those or a tool policy, only a POST on a model route is judged; the others are refused (methods.py).
        self.judges_methods = self.guarded or self.settings.tool_policy is not None
        self.litellm_checked = warn_if_litellm_runs(self.settings.hooks)  # again at the first looped request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = "" if scope["type"] == "lifespan" else self.path_of(scope)
        surface = self.surface_of(path) if scope["type"] == "http" and scope["method"] == "POST" else None
        compact = surface is None and (surface := self._compact_judged(scope, path)) is not None
        if surface is None:
            if self.judges_methods and scope["type"] == "http" and scope["method"] != "POST":
                judged = await judged_method(path, scope, receive, send, self.surface_of)
                if judged is None:
                    return
                receive = judged
            if scope["type"] == "lifespan":
                await self.lifecycle.lifespan(self.app, scope, receive, send)
            elif scope["type"] == "websocket" and self.surface_of(path) is not None:
                await socket(self.app, scope, receive, send, self.guarded, self.settings)
            elif (counted := self._count_route(scope, path)) is not None:
                await self._count(counted, scope, receive, send)
            elif (last := self._beside_responses(scope, path)) is not None:
                assert self.chains is not None
                await beside(self.chains, self.app, scope, receive, send, last, self.settings.max_body_bytes)
            else:
                await self.app(scope, receive, send)
            return
        loop = await self._loop_for(surface, compact, scope, receive, send)
        if loop is not None:
            self.lifecycle.in_flight.begin()  # a shut-down waits for the loop, its cancellation included
            try:
                await loop.run()
            finally:
                self.lifecycle.in_flight.end()

    async def _count(self, counted: Surface, scope: Scope, receive: Receive, send: Send) -> None:
        """A token count on a route with a tool hook (counting.py). A method of its own, so that `__call__`'s frame,
        which lasts as long as a looped stream, is not made larger by this call's many arguments."""
        if not self.lifecycle.started and not await started(self.lifecycle, self.settings.hook_timeout, counted, send):
            return
        policy = None
        if self.settings.tool_policy is not None:  # the count holds the tools this caller's turn would get
            read, policy = await read_policy(scope, counted, send, self.settings, self.served)
            if not read:
                return
        await count(
            self.tool_hooks,
            counted,
            self.providers[counted.name],
            self.app,
            scope,
            receive,
            send,
            chains=self.chains,
            max_body_bytes=self.settings.max_body_bytes,
            hook_timeout=self.settings.hook_timeout,
            policy=policy,
        )

    async def _loop_for(
        self, surface: Surface, compact: bool, scope: Scope, receive: Receive, send: Send
    ) -> AgenticLoop | None:
        """Read a request on a looped route: the loop that is to answer it, or None when it was answered here
        (refused, or handed to the app as it came).

        A frame of its own, over before the loop runs: what it read (the request's bytes, their first parse) is not
        held for as long as the response lasts, and the loop lets go of each once it is done with it."""
        request = await read_body(receive, self.settings.max_body_bytes)
        if request is None:
            return None  # the client left before its request was complete: nobody to answer
        raw, complete = request
        policy = None
        if self.settings.tool_policy is not None:  # every request on the route, whatever the loop does with it
            read, policy = await read_policy(scope, surface, send, self.settings, self.served)
            if not read:
                return None
        judged = policy is not None and policy.judges_names  # its tools must be looked at before the app sees them
        if not complete or len(raw) > self.settings.max_body_bytes:  # however the body arrived: whole, or in chunks
            if self.guarded or judged:  # the guardrails, or the policy, cannot read it: refused, not passed unchecked
                message = f"the request body is over max_body_bytes={self.settings.max_body_bytes}"
                await refuse(send, surface, 413, message, "request_too_large")
                return None
            logger.warning(
                "request body over max_body_bytes=%d: passed through without hooks", self.settings.max_body_bytes
            )
            await self.app(scope, replay(raw, receive, more_body=not complete), send)
            return None
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError as error:
            # Refused rather than passed on: a lenient app (NaN, a lone surrogate escape) would read it with every
            # hook skipped and internal fields kept.
            await refuse(send, surface, 400, f"the request body is not valid JSON: {error}", "invalid_json")
            return None
        if type(body) is dict:
            changed = has_internal_fields(body)  # fields only trusted server code may set
            if changed:
                body = {name: value for name, value in body.items() if not is_internal_field(name)}
            if surface.chains_by_id:  # internal ids never reach the client (shown.py)
                send = shown = ShownIds(send, self.settings.max_body_bytes)
                resumed = await self.chains.resume(body, scope) if self.chains is not None else None
                if resumed is not None:
                    shown.hide(resumed["previous_response_id"], body["previous_response_id"])
                    body, changed, scope = resumed, True, scope_unencoded(scope)
            streaming = body.get("stream") is True
            mode = stream_mode(self.settings.streaming, self.stream_wishes, body) if streaming and self.hooks else None
            takes_part = bool(self.hooks) and (not streaming or mode is not None) and not compact
            # A stream that passes by the loop is still judged by the guardrails: they judge the request.
            checks_only = not takes_part and bool(self.setup.guardrail_hooks)
            stream_options = relay = None
            if judged and (prompt := stored_prompt(surface.name, body)) is not None:
                # A stored prompt may carry tools of its own, which nothing here can read: refused (fail closed).
                await refuse(send, surface, 403, PROMPT_REFUSED.format(param=prompt), "tool_policy_refused", prompt)
                return None
            if judged and not takes_part:  # a request the loop passes by: its own tools judged all the same
                assert policy is not None
                problem = wrong_type(body)
                if problem is not None:
                    await refuse(send, surface, 400, problem[1], "invalid_request", problem[0])
                    return None
                passed = scoped(surface, body, client_own(body, policy), policy)
                changed, body = changed or passed is not body, passed
            if takes_part or checks_only:
                problem, code = wrong_type(body), "invalid_request"
                if problem is None and takes_part and may_loop(scope, policy, self.settings.max_agentic_loops):
                    problem, code = surface.unsupported(body), "unsupported_parameter"
                if problem is not None:
                    await refuse(send, surface, 400, problem[1], code, problem[0])
                    return None
                if streaming and takes_part:
                    stream_options = body.get("stream_options")
                    relay = surface.relay(stream_options) if mode == "live" else None
                    if isinstance(send, ShownIds):  # each round's id is hidden from its first event on
                        send.follow(relay)
                    if relay is None:  # buffered: the app is called without streaming; the stream is written after
                        del body["stream"]
                        body.pop("stream_options", None)
                        changed = True
                    else:  # live: the app streams every round, asked for what the relay needs
                        live_body = surface.streaming_request(body)
                        changed = changed or live_body is not body
                        body = live_body
            if changed:
                try:
                    raw = own_size(orjson.dumps(body))  # kept for the whole loop
                except TypeError:  # orjson's JSONEncodeError: only the client's depth can fail what orjson read
                    await refuse(send, surface, 400, TOO_DEEP, "invalid_request")
                    return None
                scope = scope_with_body_length(scope, len(raw))
            if takes_part or checks_only:
                if not self.litellm_checked:  # LiteLLM's proxy reads its config at its start-up, after our __init__
                    self.litellm_checked = warn_if_litellm_runs(self.settings.hooks, final=True)
                if not self.lifecycle.started and not await started(
                    self.lifecycle, self.settings.hook_timeout, surface, send
                ):
                    return None
                try:
                    return AgenticLoop(
                        self.setup,
                        surface,
                        self.providers[surface.name],
                        scope,
                        receive,
                        send,
                        body,
                        raw,
                        stream_options,
                        streaming and not checks_only,  # passing by: the app's stream goes to the client as it is
                        relay,
                        checks_only,
                        policy if takes_part else None,  # else judged above: the loop only hands the body on
                        None if changed else raw,  # not written yet: the client's bytes, were a write to fail
                    )
                except (TypeError, RecursionError):  # the client's tools, read as bytes under a tool policy
                    if changed or not too_deep(raw):
                        raise
                    await refuse(send, surface, 400, TOO_DEEP, "invalid_request")
                    return None
        elif self.guarded or judged:  # a JSON array, string, number or null, or no body: nothing a check can judge
            await refuse(send, surface, 400, "the request body must be a JSON object", "invalid_request")
            return None
        await self.app(scope, replay(raw, receive), send)
        return None

    def _compact_judged(self, scope: Scope, path: str) -> Surface | None:
        """With a guardrail or a tool policy mounted, the format of a POST they judge as a request that does not loop;
        else None. `<Responses route>/compact`: the conversation goes to the model to be compacted. A route or that path
        with a trailing slash (`/v1/messages/`): many servers answer it as the route, and an app with a catch-all
        (a proxy) hands it on as it came; not looped, as the loop's calls would go to the app at that spelling."""
        if not (self.setup.guardrail_hooks or self.settings.tool_policy) or scope.get("method") != "POST":
            return None
        if path.endswith("/") and (surface := self.surface_of(path[:-1])) is not None:
            return surface
        base, _, last = path.removesuffix("/").rpartition("/")
        surface = self.surface_of(base) if last == "compact" else None
        return surface if surface is not None and surface.chains_by_id else None

    def _count_route(self, scope: Scope, path: str) -> Surface | None:
        """For `POST <Messages route>/count_tokens` or `POST <Responses route>/input_tokens` with a tool hook or a
        tool policy mounted, the route's format: the count is to hold the tools the route's own request would get."""
        if not (self.tool_hooks or self.settings.tool_policy) or scope.get("method") != "POST":
            return None
        base, _, last = path.rpartition("/")
        surface = self.surface_of(base) if last in COUNT_ENDPOINTS.values() else None
        return surface if surface is not None and COUNT_ENDPOINTS.get(surface.name) == last else None

    def _beside_responses(self, scope: Scope, path: str) -> str | None:
        """For a request under a Responses route that may name a recorded id (`POST .../compact`, `POST
        .../input_tokens`, `DELETE .../{id}`), its path's last segment (followups.py); else None."""
        if self.chains is None or scope["type"] != "http" or scope["method"] not in ("POST", "DELETE"):
            return None
        base, _, last = path.rpartition("/")
        if not last or (scope["method"] == "POST" and last not in CONTEXT_ENDPOINTS):
            return None
        surface = self.surface_of(base)
        return last if surface is not None and surface.chains_by_id else None

    def path_of(self, scope: Scope) -> str:
        """The path a request is judged by: as the app behind routes it, without the `root_path` of a `Mount` or of
        uvicorn's `--root-path` (`routes.judged_path`)."""
        return judged_path(scope, self.is_model_path)

    def is_model_path(self, path: str) -> bool:
        """Whether a path is a model route or under one (its trailing slash, `compact`, the counts)."""
        return model_route(path, self.surface_of) is not None

    def surface_of(self, path: str) -> Surface | None:
        """The wire format a path is routed to: by its exact path, else by a route template."""
        surface = self.routes.get(path)
        if surface is None and self.templated is not None:
            surface = self.templated.get(path)
        return surface
