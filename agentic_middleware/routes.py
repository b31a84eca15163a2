"""Which request paths take part, by wire format: exact paths, path templates, and LiteLLM's paths as a preset.

An exact path stays one dict lookup on the hot path; templates (`/openai/deployments/{model}/chat/completions`,
`{name}` for one path segment, `{name:path}` for one or more) are compiled once into one regular expression, tried
only when no exact path matched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

logger = logging.getLogger("agentic_middleware")

T = TypeVar("T")

# The paths LiteLLM's proxy serves each wire format on (its OpenAI-compatible, Azure-style and Anthropic routes).
LITELLM_ROUTES: Mapping[str, str] = MappingProxyType(
    {
        "/v1/chat/completions": "chat_completions",
        "/chat/completions": "chat_completions",
        "/engines/{model:path}/chat/completions": "chat_completions",
        "/openai/deployments/{model:path}/chat/completions": "chat_completions",
        "/v1/messages": "messages",
        "/messages": "messages",
        "/v1/responses": "responses",
        "/responses": "responses",
        "/openai/v1/responses": "responses",
    }
)
PRESETS: Mapping[str, Mapping[str, str]] = MappingProxyType({"litellm": LITELLM_ROUTES})

_PARAMETER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_PATTERNS = {None: "[^/]+", "str": "[^/]+", "path": ".+"}
# The endings of the model routes a wrapped app may serve (checked at start for paths no route covers).
MODEL_ENDINGS = ("/chat/completions", "/messages", "/responses")


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

    The app is found by following `.app` through the middleware in between; any other app gives nothing.
    """
    node, seen = app, set()
    while node is not None and id(node) not in seen and not isinstance(getattr(node, "routes", None), list):
        seen.add(id(node))
        node = getattr(node, "app", None)
    routes = getattr(node, "routes", None)
    if not isinstance(routes, list):
        return []
    return [
        path
        for path in _post_paths(routes, "")
        if path.endswith(MODEL_ENDINGS) and table.get(_PARAMETER.sub("x", path)) is None
    ]


def _post_paths(routes: list[Any], prefix: str) -> list[str]:
    found = []
    for route in routes:
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            continue
        children = getattr(route, "routes", None)
        if isinstance(children, list) and children:  # a Mount: its routes under its path
            found += _post_paths(children, prefix + path)
        elif "POST" in (getattr(route, "methods", None) or ()):
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
