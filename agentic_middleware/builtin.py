"""The shipped server tools by name, so a YAML config turns them on without a line of Python.

    agentic_middleware:
      builtin_tools:
        compression: {threshold: 4000}          # long history texts become stubs; retrieve(key) brings them back
        web_search: {backend: corpus}           # or searxng / tavily with url (and api_key)

Each name maps to a function building the hook from the entry's options; an unknown name or option is a
`ConfigurationError` naming the ones there are, so a typo stops the start instead of serving without the tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from .errors import ConfigurationError

SEARCH_BACKENDS = ("corpus", "searxng", "tavily")


def web_search(
    backend: str = "corpus", url: str | None = None, api_key: str | None = None, max_results: int = 5
) -> object:
    """`web_search(query)`, also for Anthropic's and OpenAI's native web search tools: the bundled offline corpus,
    or a SearXNG or Tavily API at `url`."""
    from .websearch import CorpusSearch, HttpSearch, websearch_hook

    if backend not in SEARCH_BACKENDS:
        raise ConfigurationError(f"backend must be one of {', '.join(SEARCH_BACKENDS)}, got {backend!r}")
    if not isinstance(max_results, int) or isinstance(max_results, bool) or max_results < 1:
        raise ConfigurationError(f"max_results must be a positive integer, got {max_results!r}")
    if backend == "corpus":
        if url is not None or api_key is not None:
            raise ConfigurationError("the corpus backend takes no url or api_key")
        return websearch_hook(CorpusSearch(), max_results)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"the {backend} backend needs url: an http(s) URL, got {url!r}")
    kind = cast(Literal["searxng", "tavily"], backend)
    return websearch_hook(HttpSearch(url, kind, api_key), max_results)


def compression(threshold: int = 4000, preview: int = 200, timeout: float = 30.0, ttl: float = 86400.0) -> object:
    """Texts in the history longer than `threshold` characters become stubs with a key; `retrieve(key)` brings them
    back (agentic_middleware.compression); a Responses turn's texts are kept `ttl` seconds for its follow-ups."""
    from .compression import CompressionHook

    for name, value in (("threshold", threshold), ("preview", preview)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return CompressionHook(threshold, preview, float(timeout), ttl)


BUILTIN_TOOLS: Mapping[str, Callable[..., object]] = {"web_search": web_search, "compression": compression}


def from_config(entries: object, where: str) -> tuple[object, ...]:
    """Hooks from a `builtin_tools` mapping of name -> options (`{}` or null for the defaults), in its order."""
    if not isinstance(entries, Mapping):
        raise ConfigurationError(f"{where} must be a mapping of tool name to options, got {entries!r}")
    hooks = []
    for name, options in entries.items():
        build = BUILTIN_TOOLS.get(name)
        if build is None:
            known = ", ".join(BUILTIN_TOOLS)
            raise ConfigurationError(f"{where}: unknown built-in tool {name!r} (known: {known})")
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ConfigurationError(f"{where}.{name} must be a mapping of options, got {options!r}")
        try:
            hooks.append(build(**cast(Mapping[str, Any], options)))
        except TypeError as error:
            raise ConfigurationError(f"{where}.{name}: {error}".replace(f"{build.__name__}() ", "")) from None
        except ConfigurationError as error:
            raise ConfigurationError(f"{where}.{name}: {error}") from None
    return tuple(hooks)
