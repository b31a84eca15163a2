"""`Settings`: every option of the middleware, checked when it is built.

Given in code, or read from a YAML file by `config.load_config`; either way a mistake stops the gateway at start
instead of serving with a hook that never runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .closing import CLOSING_MODES, DEFAULT_CLOSING_TEXT
from .dotted import import_callable
from .errors import ConfigurationError
from .routes import PRESETS, RouteTable, template_error
from .surfaces import Surface, surfaces

DEFAULT_ROUTES: Mapping[str, str] = MappingProxyType(
    {"/v1/messages": "messages", "/v1/chat/completions": "chat_completions", "/v1/responses": "responses"}
)
DEFAULT_FORWARD_UNJUDGED = ("/v1/messages/count_tokens", "/v1/responses/input_tokens", "/v1/responses/compact")
"""The POST paths `agentic-gateway` forwards without the hooks judging them when a guardrail or tool policy is
mounted (gateway/paths.py): the token counts, which ask no model, and the compaction, which the guardrails judge
anyway (middleware.py). Claude Code and Codex call all three. With a deployment or pre-request hook mounted the
compaction is left out (gateway/paths.py): those run on looped requests alone."""
DEFAULT_MAX_AGENTIC_LOOPS = 3
DEFAULT_RERUN_RETRIES = 2  # tries again of a rerun the app answered with a transient error (retries.py)
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's own request limit
MIN_KEEPALIVE = 0.01  # seconds
# Headers that describe one message, its body or its connection: each internal call has its own.
PER_CALL_HEADERS = frozenset(
    (
        "content-length",
        "transfer-encoding",
        "content-encoding",
        "content-type",
        "host",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    )
)
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")  # latin-1 text without line breaks


def loop_limit(value: object, source: str, least: int = 0) -> int:
    """`value` as a limit: a whole number of at least `least` (not a bool), else an error naming `source`.

    A loop limit of 0 means no reruns: the app's first answer is the client's, no hook is asked.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(f"{source} must be an integer of at least {least}, got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """Every option of the middleware, validated; `hooks` are hook objects, already resolved."""

    hooks: tuple[object, ...] = ()
    routes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    max_agentic_loops: int = DEFAULT_MAX_AGENTIC_LOOPS
    custom_llm_provider: str | Mapping[str, str] | None = None
    sum_usage: bool | None = None  # None: as the route's provider does (summed on messages), accounting.md
    log_bodies: bool = False
    tracing: bool = False
    on_round: Callable[..., Any] | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    app_timeout: float | None = None
    hook_timeout: float | None = None
    loop_timeout: float | None = None
    error_details: bool = True
    streaming: bool | str | None = None
    stream_keepalive: float = 5.0
    rerun_retries: int = DEFAULT_RERUN_RETRIES
    closing: str = "call"
    closing_text: str = DEFAULT_CLOSING_TEXT
    internal_headers: Mapping[str, str] = field(default_factory=dict)
    gates_see_stream: bool = True
    caller: Callable[..., Any] | None = None  # who is calling (callers.py); None: the key hash
    chain_store: Any = None  # the middleware's `chain_store` (chains.py); YAML's `{redis: URL}` is a RedisChainStore
    tool_policy: Callable[..., Any] | None = None  # what each caller may use (policy.py); None: everything
    forward_unjudged: tuple[str, ...] = DEFAULT_FORWARD_UNJUDGED  # agentic-gateway only (gateway/paths.py)

    def __post_init__(self) -> None:
        loop_limit(self.max_agentic_loops, "max_agentic_loops")
        loop_limit(self.max_body_bytes, "max_body_bytes", least=1)
        loop_limit(self.rerun_retries, "rerun_retries")
        if self.streaming is not None and not isinstance(self.streaming, bool) and self.streaming != "buffered":
            raise ConfigurationError(f'streaming must be true, false, "buffered" or null, got {self.streaming!r}')
        for name in ("app_timeout", "hook_timeout", "loop_timeout", "stream_keepalive"):
            value = getattr(self, name)
            if (value is not None or name == "stream_keepalive") and (
                isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf
            ):
                raise ConfigurationError(f"{name} must be a number of seconds above 0, got {value!r}")
        if self.stream_keepalive < MIN_KEEPALIVE:  # a keep-alive every few microseconds would be a busy loop
            raise ConfigurationError(
                f"stream_keepalive must be at least {MIN_KEEPALIVE:g} s, got {self.stream_keepalive!r}"
            )
        if self.sum_usage is not None and not isinstance(self.sum_usage, bool):
            raise ConfigurationError(f"sum_usage must be true, false or null, got {self.sum_usage!r}")
        for name in ("log_bodies", "tracing", "error_details", "gates_see_stream"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.internal_headers, Mapping) or not all(
            isinstance(name, str)
            and _TOKEN.fullmatch(name)
            and isinstance(value, str)
            and _HEADER_VALUE.fullmatch(value)
            for name, value in self.internal_headers.items()
        ):
            raise ConfigurationError(
                f"internal_headers must map header names to text values (`{{call_id}}` for the loop's call id), "
                f"got {self.internal_headers!r}"
            )
        for name, value in self.internal_headers.items():
            if name.lower() in PER_CALL_HEADERS:
                raise ConfigurationError(
                    f"internal_headers may not set {name!r}: the middleware writes it for each internal call"
                )
            unknown = [found for found in _PLACEHOLDER.findall(value) if found != "call_id"]
            if unknown:
                raise ConfigurationError(
                    f"internal_headers[{name!r}] has an unknown placeholder {{{unknown[0]}}}: "
                    "the only one is {call_id}"
                )
        if self.closing not in CLOSING_MODES:
            raise ConfigurationError(f"closing must be one of {', '.join(CLOSING_MODES)}, got {self.closing!r}")
        if not isinstance(self.closing_text, str) or not self.closing_text.strip():
            raise ConfigurationError(f"closing_text must be a text that is not empty, got {self.closing_text!r}")
        if isinstance(self.on_round, str):
            object.__setattr__(self, "on_round", import_callable(self.on_round, "on_round", None))
        if self.on_round is not None and not callable(self.on_round):
            raise ConfigurationError(f"on_round must be a callable or a dotted path to one, got {self.on_round!r}")
        for name in ("caller", "tool_policy"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, import_callable(getattr(self, name), name, None))
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ConfigurationError(
                    f"{name} must be a callable or a dotted path to one, got {getattr(self, name)!r}"
                )
        known = surfaces()
        if isinstance(self.routes, str) and self.routes in PRESETS:
            preset = {path: name for path, name in PRESETS[self.routes].items() if name in known}
            object.__setattr__(self, "routes", preset)
        if not isinstance(self.routes, Mapping):
            raise ConfigurationError(
                f"routes must map a path to a wire format, or name a preset ({', '.join(PRESETS)}), got {self.routes!r}"
            )
        for path, name in self.routes.items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise ConfigurationError(f"routes: {path!r} is not a path (it must start with '/')")
            problem = template_error(path)
            if problem:
                raise ConfigurationError(f"routes: {path!r} {problem}")
            if name not in known:
                raise ConfigurationError(
                    f"routes: {path!r} maps to unknown wire format {name!r}; known: {', '.join(known)}"
                )
        self._check_forward_unjudged()
        provider = self.custom_llm_provider
        if isinstance(provider, Mapping):
            if set(provider) - set(known) or not all(isinstance(v, str) for v in provider.values()):
                raise ConfigurationError(
                    f"custom_llm_provider must map wire formats ({', '.join(known)}) to names, got {provider!r}"
                )
        elif provider is not None and not isinstance(provider, str):
            raise ConfigurationError(f"custom_llm_provider must be a string or a mapping, got {provider!r}")

    def _check_forward_unjudged(self) -> None:
        listed = self.forward_unjudged
        if isinstance(listed, str) or not isinstance(listed, list | tuple):
            raise ConfigurationError(f"forward_unjudged must be a list of paths, got {listed!r}")
        for path in listed:
            if not isinstance(path, str) or not path.startswith("/"):
                raise ConfigurationError(f"forward_unjudged: {path!r} is not a path (it must start with '/')")
            problem = template_error(path)
            if problem:
                raise ConfigurationError(f"forward_unjudged: {path!r} {problem}")
        object.__setattr__(self, "forward_unjudged", tuple(listed))

    def header_templates(self) -> list[tuple[bytes, str]]:
        """The operator's headers for internal calls: lowercase names, values with `{call_id}` still to fill."""
        return [(name.lower().encode(), value) for name, value in self.internal_headers.items()]

    def route_table(self) -> RouteTable[Surface]:
        """Each routed path or path template with its wire format."""
        return RouteTable(self.surface_routes())

    def surface_routes(self) -> dict[str, Surface]:
        """Each routed path with its wire format."""
        known = surfaces()
        return {path: known[name] for path, name in self.routes.items()}

    def provider(self, surface: Surface) -> str:
        """The `custom_llm_provider` hooks see on a route."""
        if isinstance(self.custom_llm_provider, str):
            return self.custom_llm_provider
        if isinstance(self.custom_llm_provider, Mapping):
            return self.custom_llm_provider.get(surface.name, surface.provider)
        return surface.provider


def merged(settings: Settings, **options: Any) -> Settings:
    """`settings` with the options given in code, which win over the file's."""
    return replace(settings, **{name: value for name, value in options.items() if value is not None})
