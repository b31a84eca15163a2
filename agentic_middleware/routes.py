"""Which request paths take part, by wire format: exact paths, path templates, and LiteLLM's paths as a preset.

An exact path stays one dict lookup on the hot path; templates (`/openai/deployments/{model}/chat/completions`,
`{name}` for one path segment, `{name:path}` for one or more) are compiled once into one regular expression, tried
only when no exact path matched.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

logger = logging.getLogger("agentic_middleware")

T = TypeVar("T")

# The paths LiteLLM's proxy (1.110.2) serves each wire format on: its OpenAI-compatible, Azure-style, queued and
# Anthropic routes (tests/test_routes.py reads them from its app). Left out: `/cursor/chat/completions`, whose requests
# may be Responses bodies on a chat path, and its provider pass-through routes (`/anthropic/{endpoint:path}`, ...).
LITELLM_ROUTES: Mapping[str, str] = MappingProxyType(
    {
        "/v1/chat/completions": "chat_completions",
        "/chat/completions": "chat_completions",
        "/engines/{model:path}/chat/completions": "chat_completions",
        "/openai/deployments/{model:path}/chat/completions": "chat_completions",
        "/queue/chat/completions": "chat_completions",
        "/v1/messages": "messages",
        "/claude_code_gateway/v1/messages": "messages",
        "/v1/responses": "responses",
        "/responses": "responses",
        "/openai/v1/responses": "responses",
    }
)
PRESETS: Mapping[str, Mapping[str, str]] = MappingProxyType({"litellm": LITELLM_ROUTES})
# Paths that end like a model route but serve another API: OpenAI Assistants' thread messages, LiteLLM's workflow
# runs, MCP's SSE transport. The missing-route warning leaves them out.
NOT_MODEL_ROUTES = (
    "/threads/{thread_id}/messages",
    "/v1/threads/{thread_id}/messages",
    "/v1/workflows/runs/{run_id}/messages",
    "/mcp/sse/messages",
    "/sse/messages",
)

_PARAMETER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_PATTERNS = {None: "[^/]+", "str": "[^/]+", "path": ".+"}
# The endings of the model routes a wrapped app may serve (checked at start for paths no route covers).
MODEL_ENDINGS = ("/chat/completions", "/messages", "/responses")


def route_path(scope: Mapping[str, Any]) -> str:
    """The request's path as the app's router matches it: `path` without the `root_path` it begins with.

    ASGI gives an app mounted under a prefix (a Starlette `Mount`, uvicorn's `--root-path`) the whole path in `path`
    and the prefix in `root_path`; Starlette's router, and so the app behind the middleware, routes by what is left.
    A `root_path` that is not a whole segment of the path's start (`/llm` of `/llmx/...`) is no prefix of it: the
    path stays whole, as the router leaves it."""
    path: str = scope["path"]
    root = scope.get("root_path")
    if not root or not isinstance(root, str) or not path.startswith(root):
        return path
    rest = path[len(root) :]
    return rest if rest.startswith("/") or not rest else path


def judged_path(scope: Mapping[str, Any], is_model: Callable[[str], bool]) -> str:
    """The path a request is judged by, one rule for the middleware and the gateway's paths: the one the app behind
    routes it by (`route_path`), so that a mounted app's model routes are judged, not passed by as unknown paths;
    unless only the whole path is a model route's (`is_model`): `routes` written with the mount's prefix
    (`/llm/v1/messages`) still judge what they name."""
    path: str = scope["path"]
    if not scope.get("root_path"):  # the hot path: nothing mounted
        return path
    routed = route_path(scope)
    return path if routed != path and not is_model(routed) and is_model(path) else routed


def is_template(path: str) -> bool:
    return "{" in path


def template_error(path: str) -> str | None:
    """What is wrong with a path template, if anything."""
    rest = _PARAMETER.sub("", path)
    if "{" in rest or "}" in rest:
        return "has a brace that is not a {name} or {name:path} segment"
    for match in _PARAMETER.finditer(path):
        if match.group(2) not in _PATTERNS:
            return f"has an unknown converter {match.group(2)!r} (known: str, path)"
    return None


def _pattern(template: str) -> str:
    parts, end = [], 0
    for match in _PARAMETER.finditer(template):
        parts += [re.escape(template[end : match.start()]), _PATTERNS[match.group(2)]]
        end = match.end()
    return "".join([*parts, re.escape(template[end:])])


class RouteTable(Generic[T]):
    """Paths to values (wire formats): `get` finds an exact path first, then the first template that matches."""

    def __init__(self, routes: Mapping[str, T]) -> None:
        self.exact = {path: value for path, value in routes.items() if not is_template(path)}
        self.templates = [(path, value) for path, value in routes.items() if is_template(path)]
        alternatives = "|".join(f"(?P<t{n}>{_pattern(path)})" for n, (path, _) in enumerate(self.templates))
        self.matcher = re.compile(alternatives) if self.templates else None

    def get(self, path: str) -> T | None:
        value = self.exact.get(path)
        if value is None and self.matcher is not None:
            match = self.matcher.fullmatch(path)
            if match is not None and match.lastgroup is not None:
                value = self.templates[int(match.lastgroup[1:])][1]
        return value


def uncovered_routes(app: Any, table: RouteTable[Any]) -> list[str]:
    """The POST routes of a wrapped Starlette/FastAPI app that look like model routes but no configured route covers.

    The app is found by following `.app` through the middleware in between; any other app gives nothing. Paths known
    to serve other APIs under a model route's ending (`NOT_MODEL_ROUTES`) are left out.
    """
    return [
        path
        for path in _post_paths(_routes_of(app), "")
        if path.endswith(MODEL_ENDINGS)
        and table.get(_PARAMETER.sub("x", path)) is None
        and _NOT_MODEL.get(_PARAMETER.sub("x", path)) is None
    ]


def _routes_of(node: Any) -> list[Any]:
    """The routes of an app or of a Mount: the first non-empty `routes` list on the way down its `.app`s."""
    seen = set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        routes = getattr(node, "routes", None)
        if isinstance(routes, list) and routes:
            return routes
        node = getattr(node, "app", None)
    return []


def _entries(routes: list[Any]) -> list[Any]:
    """A route list as it is served: FastAPI's included routers opened up.

    FastAPI (0.13x on) keeps each `include_router` as one entry without a `path`; its own
    `fastapi.routing.iter_route_contexts` (what its OpenAPI schema is built from) gives the routes inside, their
    prefixes applied. FastAPI is not imported here: an app that uses it has imported it already; older versions
    copy the routes into the list, prefixed.
    """
    expand = getattr(sys.modules.get("fastapi.routing"), "iter_route_contexts", None)
    return list(expand(routes)) if callable(expand) else routes


def _post_paths(routes: list[Any], prefix: str) -> list[str]:
    found = []
    for route in _entries(routes):
        path = getattr(route, "path", None)
        if isinstance(getattr(route, "routes", None), list):  # a Mount (its path), a Host (none): its routes under it
            found += _post_paths(_routes_of(route), prefix + (path if isinstance(path, str) else ""))
        elif isinstance(path, str) and "POST" in (getattr(route, "methods", None) or ()):
            found.append(prefix + path)
    return found


def warn_uncovered(app: Any, table: RouteTable[Any]) -> None:
    uncovered = uncovered_routes(app, table)
    if uncovered:
        logger.warning(
            "the wrapped app serves POST %s, which no configured route covers: requests there pass through without "
            "hooks, and the server's tool calls would reach the client. Add them to `routes` (templates such as "
            "/engines/{model}/chat/completions work; routes='litellm' covers LiteLLM's paths)",
            ", ".join(uncovered),
        )


_NOT_MODEL = RouteTable(dict.fromkeys(NOT_MODEL_ROUTES, True))
