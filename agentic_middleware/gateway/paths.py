"""Which POST paths the gateway judges, which it forwards unjudged, and which it refuses.

The gateway forwards every path it does not answer itself, and the servers behind it answer model calls on more
spellings than the three routes: llama.cpp's `llama-server` and LiteLLM's proxy serve `/chat/completions` and
`/responses` without the `/v1`, and many servers take a trailing slash. Forwarded as they came, those calls reached
the model without the hooks: no guardrail judged them, no loop ran. So, before the middleware:

- the known spellings of a model route and of its sub-paths (`/chat/completions`, `/messages`, `/responses`, with or
  without `/v1`, with or without one trailing slash; the same for `/v1/responses/compact`, `/v1/messages/count_tokens`
  and `/v1/responses/input_tokens`) are given the route's own path, so they are judged and looped as it is, and go up
  as it does (`ALIASES`);
- with a guardrail, a pre-call hook or a tool policy mounted, any other request that may carry a body to act on (any
  method but GET, HEAD, OPTIONS and DELETE) on a path the middleware does not judge is refused with a 403 in the
  route's error shape, unless the operator lists the path in `forward_unjudged`. A path no one thought of
  (`/v1/completions`, `/v1/messages/batches`, `//v1/messages`, an upstream's own alias) fails closed. The middleware
  judges a POST alone: a PUT or PATCH on a model route (or its alias, or a sub-path), or a GET, HEAD, OPTIONS or
  DELETE there with a body, is refused too, listed or not (methods.py);
- with those mounted, a GET, HEAD, OPTIONS or DELETE with a body is refused on every other path too, unless the
  operator lists it: an upstream that reads any method as a model call and matches paths case-insensitively (or
  merges slashes) takes `GET /V1/messages` with a body for the route, and no model API client sends one;
- a method that is not in upper case (`post`, as uvicorn's h11 parser hands it on) is refused with a 400 on any path:
  the middleware judges `POST` alone, and aiohttp would send it up upper-cased, as a `POST` no hook judged.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from ..hooks import DEPLOYMENT_HOOK, PRE_REQUEST_HOOK, BoundHook
from ..methods import SUB_ENDPOINTS, UNBODIED, model_route, peek_body
from ..precall import has_pre_call, is_guardrail
from ..routes import RouteTable, judged_path
from ..settings import DEFAULT_FORWARD_UNJUDGED, Settings
from .wire import MODEL_ROUTES, error_response, route_of

logger = logging.getLogger("agentic_middleware")

COMPACT = "/v1/responses/compact"
SUB_PATHS = ("/v1/responses/compact", "/v1/messages/count_tokens", "/v1/responses/input_tokens")
CANONICAL = frozenset({*MODEL_ROUTES, *SUB_PATHS})


def _aliases() -> dict[str, str]:
    aliases = {}
    for canonical in (*MODEL_ROUTES, *SUB_PATHS):
        bare = canonical.removeprefix("/v1")
        for spelling in (bare, bare + "/", canonical + "/"):
            aliases[spelling] = canonical
    return aliases


ALIASES = _aliases()
"""Each other spelling of a model route or sub-path the servers behind a gateway answer, to its own path."""


class GatewayPaths:
    """The gateway's paths, seen before the middleware: aliases rewritten to their route, unjudged bodies refused.

    A path the middleware's configured `routes` judge as it is written keeps it (an operator who routes
    `/chat/completions` itself sees it unchanged)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.routes = settings.route_table()
        self.refusing = refuses_unjudged(settings)
        hooks = [BoundHook(hook) for hook in settings.hooks]
        # A deployment or pre-request hook runs on looped requests alone, and a compaction never loops: with one
        # mounted, the guardrails judging it is not enough, and the default list leaves it out (a list the
        # operator writes is the operator's choice).
        loops_only = any(_pre_call_hook(hook) for hook in hooks)
        self.compact_judged = any(is_guardrail(hook) for hook in hooks) and not loops_only
        listed = settings.forward_unjudged
        if loops_only and listed is DEFAULT_FORWARD_UNJUDGED:
            listed = tuple(path for path in listed if path != COMPACT)
        self.listed = listed
        self.allowed = RouteTable(dict.fromkeys(listed, True))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        path = self.path_of(scope)
        if method != method.upper():  # what was judged is what goes up: never a `post` sent up as a `POST`
            message = f"the method must be in upper case (HTTP methods are case-sensitive), got {method!r}"
            await error_response(route_of(path), 400, message, "invalid_method")(scope, receive, send)
            return
        if method in UNBODIED:
            # With a body, on any path the operator has not listed: a model call no hook saw, to an upstream whose
            # catch-all router reads one whatever the method (and, matching paths case-insensitively or merging
            # slashes, whatever the spelling: `GET /V1/messages`). Without one it asks nothing: `GET /v1/models`.
            if self.refusing and not self.forwarded(method, path):
                bodied, receive = await peek_body(receive)
                if bodied:
                    await self._refuse(method, path, scope, receive, send, " with a body")
                    return
            await self.app(scope, receive, send)
            return
        if self.routes.get(path) is None and (canonical := ALIASES.get(path)) is not None:
            mounted = scope["path"][: len(scope["path"]) - len(path)]  # the `root_path` it was judged without
            # `raw_path` without the mount: it is what goes up (`upstream.forwarded_path`), to the route's own path.
            scope = {**scope, "path": mounted + canonical, "raw_path": canonical.encode()}
            path = canonical
        if self.refusing and not self.forwarded(method, path):
            await self._refuse(method, path, scope, receive, send)
            return
        await self.app(scope, receive, send)

    def path_of(self, scope: Scope) -> str:
        """The path a request is judged by, as the middleware and the app's router read it: without a mount's
        `root_path` (`judged_path`), unless the whole path is a configured route and what is left is not one (nor
        the spelling of one): `routes` written with the mount's prefix (`/gw/v1/chat/completions`) judge what they
        name, as in the middleware, rather than a `/v1/chat/completions` they do not list being refused here."""
        path = judged_path(scope, self.model_path)
        whole: str = scope["path"]
        if path != whole and self.configured(whole) and not self.configured(ALIASES.get(path, path)):
            return whole
        return path

    def configured(self, path: str) -> bool:
        """Whether the middleware's configured `routes` judge a path (a route, or a path under one)."""
        return model_route(path, self.routes.get) is not None

    async def _refuse(
        self, method: str, path: str, scope: Scope, receive: Receive, send: Send, bodied: str = ""
    ) -> None:
        """A 403 in the route's shape that says what would let the request through, if anything would.

        On a model path only a POST is judged, so another method is refused there listed or not; a POST (on any
        path) or another method on a path that is no model path goes up once `forward_unjudged` lists the path."""
        refused = f"{method} {path}{bodied} is not judged by this gateway's guardrails, pre-call hooks or tool policy"
        if method != "POST" and self.model_path(path):
            why = f"{refused}, so it is not forwarded: only a POST is judged here, listed in forward_unjudged or not"
        else:
            why = (
                f"{refused} and forward_unjudged does not list it, so it is not forwarded: list the path in "
                "forward_unjudged (the gateway's config) to send it up unjudged"
            )
        await error_response(route_of(path), 403, why, "path_not_forwarded")(scope, receive, send)

    def forwarded(self, method: str, path: str) -> bool:
        """Whether a request that may carry a body goes on: a POST the middleware judges, or one to a path
        `forward_unjudged` lists; any other method on a listed path that is not a model route's."""
        if method == "POST" and self.judged(path):
            return True
        return self.allowed.get(path) is not None and (method == "POST" or not self.model_path(path))

    def model_path(self, path: str) -> bool:
        """Whether a path is a model route, one of its spellings or a sub-path under it (`compact`, the counts)."""
        if path in CANONICAL or path in ALIASES:
            return True
        trimmed = path.removesuffix("/")
        if self.routes.get(trimmed) is not None:
            return True
        base, _, last = trimmed.rpartition("/")
        return last in SUB_ENDPOINTS and self.routes.get(base) is not None

    def judged(self, path: str) -> bool:
        """Whether the middleware judges a POST on this path with every pre-call hook mounted: a configured route, or
        (with guardrails and no deployment or pre-request hook) a `.../compact` under a Responses route
        (middleware.py)."""
        if self.routes.get(path) is not None:
            return True
        base, _, last = path.rpartition("/")
        surface = self.routes.get(base) if last == "compact" and self.compact_judged else None
        return surface is not None and surface.chains_by_id


def refuses_unjudged(settings: Settings) -> bool:
    """Whether a POST the middleware does not judge must be listed to go up: with a guardrail or a pre-call hook
    (they must see every request that reaches the model) or a tool policy (it may refuse a caller) mounted."""
    return settings.tool_policy is not None or any(has_pre_call(BoundHook(hook)) for hook in settings.hooks)


def unjudged_described(settings: Settings) -> str:
    """The start-up line's account of what goes up without the hooks."""
    if not refuses_unjudged(settings):
        return "POSTs to any path but the model routes are forwarded unjudged"
    paths = GatewayPaths(_nothing, settings)
    listed = [path for path in paths.listed if not paths.judged(path)]
    forwarded = ", ".join(listed) if listed else "none"
    return f"POSTs forwarded unjudged: {forwarded} (forward_unjudged); POSTs to other unjudged paths are refused"


def _pre_call_hook(hook: BoundHook) -> bool:
    """A deployment or pre-request hook: the middleware runs those on looped requests alone."""
    return hook.methods[DEPLOYMENT_HOOK] is not None or hook.methods[PRE_REQUEST_HOOK] is not None


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:  # pragma: no cover - never called
    raise AssertionError
