"""The middleware's settings, checked once when it is built so that mistakes stop the gateway at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import ConfigurationError
from .surfaces import Surface, surfaces

DEFAULT_ROUTES: Mapping[str, str] = MappingProxyType(
    {"/v1/messages": "messages", "/v1/chat/completions": "chat_completions"}
)
DEFAULT_MAX_AGENTIC_LOOPS = 3


def loop_limit(value: object, source: str) -> int:
    """`value` as a loop limit: a whole number of at least 1 (not a bool), else an error naming `source`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{source} must be an integer of at least 1, got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """Every option of the middleware, validated."""

    routes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    max_agentic_loops: int = DEFAULT_MAX_AGENTIC_LOOPS
    custom_llm_provider: str | Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        loop_limit(self.max_agentic_loops, "max_agentic_loops")
        known = surfaces()
        if not isinstance(self.routes, Mapping):
            raise ConfigurationError(f"routes must map a path to a wire format, got {self.routes!r}")
        for path, name in self.routes.items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise ConfigurationError(f"routes: {path!r} is not a path (it must start with '/')")
            if name not in known:
                raise ConfigurationError(
                    f"routes: {path!r} maps to unknown wire format {name!r}; known: {', '.join(known)}"
                )
        provider = self.custom_llm_provider
        if isinstance(provider, Mapping):
            unknown = sorted(set(provider) - set(known))
            if unknown or not all(isinstance(v, str) for v in provider.values()):
                raise ConfigurationError(
                    f"custom_llm_provider must map wire formats ({', '.join(known)}) to names, got {provider!r}"
                )
        elif provider is not None and not isinstance(provider, str):
            raise ConfigurationError(f"custom_llm_provider must be a string or a mapping, got {provider!r}")

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
