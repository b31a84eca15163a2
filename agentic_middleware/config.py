"""The middleware's settings: given in code, by dotted path, or in a YAML file.

Everything is checked when the middleware is built, so a mistake stops the
gateway at start instead of serving with a hook that never runs.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .closing import CLOSING_MODES, DEFAULT_CLOSING_TEXT
from .errors import ConfigurationError
from .hooks import BoundHook
from .routes import PRESETS, RouteTable, template_error
from .surfaces import Surface, surfaces

logger = logging.getLogger("agentic_middleware")

DEFAULT_ROUTES: Mapping[str, str] = MappingProxyType(
    {"/v1/messages": "messages", "/v1/chat/completions": "chat_completions", "/v1/responses": "responses"}
)
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
SECTION = "agentic_middleware"
ENV_PREFIX = "os.environ/"
MCP_SERVERS = "mcp_servers"  # builds `MCPTools` hooks (agentic_middleware.mcp)
BUILTIN_TOOLS = "builtin_tools"  # the shipped tools by name (agentic_middleware.builtin)


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
    sum_usage: bool = True
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
        for name in ("sum_usage", "log_bodies", "tracing", "error_details", "gates_see_stream"):
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
            object.__setattr__(self, "on_round", _import_callable(self.on_round, "on_round", None))
        if self.on_round is not None and not callable(self.on_round):
            raise ConfigurationError(f"on_round must be a callable or a dotted path to one, got {self.on_round!r}")
        if isinstance(self.caller, str):
            object.__setattr__(self, "caller", _import_callable(self.caller, "caller", None))
        if self.caller is not None and not callable(self.caller):
            raise ConfigurationError(f"caller must be a callable or a dotted path to one, got {self.caller!r}")
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
        provider = self.custom_llm_provider
        if isinstance(provider, Mapping):
            if set(provider) - set(known) or not all(isinstance(v, str) for v in provider.values()):
                raise ConfigurationError(
                    f"custom_llm_provider must map wire formats ({', '.join(known)}) to names, got {provider!r}"
                )
        elif provider is not None and not isinstance(provider, str):
            raise ConfigurationError(f"custom_llm_provider must be a string or a mapping, got {provider!r}")

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


def warn_if_litellm_runs(hooks: Iterable[object], final: bool = False) -> bool:
    """Warn when LiteLLM, imported in this process, has our hooks in its `litellm.callbacks`.

    Then LiteLLM runs their loop itself inside the model app, the app's answers reach us with no call left to
    claim, and the middleware silently never acts (the set-up a shared config file invites). True once checked
    for good: a warning was given, or `final` (the first looped request, when LiteLLM's start-up has run).
    """
    litellm = sys.modules.get("litellm")
    registered = getattr(litellm, "callbacks", None) if litellm is not None else None
    if not isinstance(registered, list):
        return final
    shared = [hook for hook in hooks if any(_same_hook(hook, callback) for callback in registered)]
    if not shared:
        return final
    logger.warning(
        "hooks %s are also in litellm.callbacks: LiteLLM runs their agentic loop itself inside the model app, so "
        "this middleware never sees a call to act on. List them for one of the two only: for the middleware, move "
        "them from litellm_settings.callbacks to the agentic_middleware.hooks section of the config (LiteLLM does "
        "not read it)",
        ", ".join(type(hook).__name__ for hook in shared),
    )
    return True


def _same_hook(ours: object, theirs: object) -> bool:
    """The same object, or the same hook loaded twice.

    LiteLLM's loader runs a config folder's module file anew (not through `sys.modules`), so its instance is
    another object: of another copy of a class defined in that file (same module name, qualified name and source
    file), or of a library class such as `ServerTools` configured the same way (the same repr, memory addresses
    aside). Two instances of one class whose repr says nothing of them are taken for two hooks.
    """
    if ours is theirs:
        return True
    mine, other = type(ours), type(theirs)
    if mine is not other:
        return _origin(mine) == _origin(other)
    shown = _shown(ours)
    return mine.__repr__ is not object.__repr__ and shown == _shown(theirs)


def _origin(kind: type) -> tuple[str, str, str | None]:
    """Where a class was defined: its module's name, its qualified name, and the file of its first method."""
    code = next((value.__code__ for value in vars(kind).values() if hasattr(value, "__code__")), None)
    return kind.__module__, kind.__qualname__, code.co_filename if code is not None else None


def _shown(hook: object) -> str:
    try:
        return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(hook))
    except Exception:
        return object.__repr__(hook)


def resolve_hooks(entries: Iterable[object], where: str, folder: Path | None = None) -> tuple[object, ...]:
    """Hook objects from instances and dotted paths (one path alone too); an entry that is no hook is an error."""
    if isinstance(entries, str):
        entries = [entries]
    if isinstance(entries, bytes) or not isinstance(entries, Iterable):
        raise ConfigurationError(f"{where} must be a list of hooks, got {entries!r}")
    hooks = []
    for entry in entries:
        hook = _import_path(entry, where, folder) if isinstance(entry, str) else entry
        if hook is None:
            continue
        try:
            BoundHook(hook)
        except ConfigurationError as error:
            raise ConfigurationError(f"{where} entry {entry!r}: {error}") from None
        hooks.append(hook)
    return tuple(hooks)


def _import_path(path: str, where: str, folder: Path | None) -> object:
    """The object a dotted path names: the part after the last dot is an attribute of the module before it."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        # LiteLLM's built-in integrations ("langfuse", "prometheus") are names without a dot.
        logger.warning("%s entry %r is a LiteLLM built-in callback, not an agentic hook: ignored", where, path)
        return None
    searched = ([str(folder)] if folder else []) + ["sys.path"]
    if folder is not None:
        sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise ConfigurationError(
                f"{where} entry {path!r}: no module named {module_name!r} (looked in {', '.join(searched)})"
            ) from None
        raise ConfigurationError(f"{where} entry {path!r}: importing {module_name!r} failed: {error}") from error
    except Exception as error:
        raise ConfigurationError(
            f"{where} entry {path!r}: importing {module_name!r} failed: {type(error).__name__}: {error}"
        ) from error
    finally:
        if folder is not None:
            sys.path.remove(str(folder))
    try:
        hook = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"{where} entry {path!r}: module {module_name!r} has no {attribute!r}") from None
    if isinstance(hook, type):
        instance = re.sub(r"(?<!^)(?=[A-Z])", "_", attribute).lower()
        raise ConfigurationError(
            f"{where} entry {path!r} resolved to a class, not a hook instance, so it would never run. "
            f"Create the instance in {module_name}: `{instance} = {attribute}()`, "
            f"then name it: {module_name}.{instance}"
        )
    return hook


def _import_callable(path: str, where: str, folder: Path | None) -> object:
    if "." not in path:
        raise ConfigurationError(f"{where} must be a dotted path such as my_module.record_round, got {path!r}")
    return _import_path(path, where, folder)


def load_config(path: str | os.PathLike[str]) -> Settings:
    """Read a YAML file: LiteLLM's `litellm_settings.callbacks` and the `agentic_middleware` section."""
    try:
        import yaml
    except ImportError:
        raise ConfigurationError(f"reading {path} needs PyYAML: pip install 'agentic-middleware[yaml]'") from None
    file = Path(path)
    try:
        document = yaml.safe_load(file.read_text()) or {}
    except OSError as error:
        raise ConfigurationError(f"cannot read config {file}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{file} is not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"{file}: the top level must be a mapping, got {type(document).__name__}")
    section = _mapping(document.get(SECTION) or {}, SECTION, file)
    known = {f.name for f in fields(Settings)} | {MCP_SERVERS, BUILTIN_TOOLS}
    unknown = sorted(map(str, set(section) - known))
    if unknown:
        raise ConfigurationError(
            f"{file}: unknown option {', '.join(map(repr, unknown))} in {SECTION} (known: {', '.join(sorted(known))})"
        )
    options = {name: _from_env(value, f"{SECTION}.{name}", file) for name, value in section.items()}
    litellm_settings = _mapping(document.get("litellm_settings") or {}, "litellm_settings", file)
    callbacks = _from_env(litellm_settings.get("callbacks") or [], "litellm_settings.callbacks", file)
    entries = (callbacks, options.pop("hooks", None) or [])
    hooks = tuple(
        hook
        for where, listed in zip(("litellm_settings.callbacks", f"{SECTION}.hooks"), entries, strict=True)
        for hook in resolve_hooks(listed, f"{where} in {file}", file.parent.resolve())
    )
    if options.get(BUILTIN_TOOLS) is not None:
        hooks += _builtin_hooks(options.pop(BUILTIN_TOOLS), f"{SECTION}.{BUILTIN_TOOLS}", file)
    options.pop(BUILTIN_TOOLS, None)
    if options.get(MCP_SERVERS) is not None:
        hooks += _mcp_hooks(options.pop(MCP_SERVERS), f"{SECTION}.{MCP_SERVERS}", file)
    options.pop(MCP_SERVERS, None)
    for name in ("on_round", "caller"):
        if isinstance(options.get(name), str):
            options[name] = _import_callable(options[name], f"{SECTION}.{name} in {file}", file.parent)
    # `os.environ/NAME` values arrive as strings: numbers and flags are read from them (a quoted YAML value is not).
    variables = {
        name: value.removeprefix(ENV_PREFIX)
        for name, value in section.items()
        if isinstance(value, str) and value.startswith(ENV_PREFIX)
    }
    for name in variables:
        value = options[name]
        if name in _NUMBERS:
            with contextlib.suppress(ValueError):  # left as it is, for the check to name it
                options[name] = _NUMBERS[name](value)
        elif name in _FLAGS and value.lower() in ("true", "false", "null", "none", ""):
            options[name] = {"true": True, "false": False}.get(value.lower())
    try:
        return Settings(hooks=hooks, **options)
    except ConfigurationError as error:
        source = next(
            (f" (from the environment variable {variables[n]})" for n in variables if f"{error}".startswith(n)), ""
        )
        raise ConfigurationError(f"{file}: {SECTION}.{error}{source}") from None


def _builtin_hooks(entries: object, where: str, file: Path) -> tuple[object, ...]:
    from .builtin import from_config

    try:
        return from_config(entries, where)
    except ConfigurationError as error:
        raise ConfigurationError(f"{file}: {error}") from None


def _mcp_hooks(entries: object, where: str, file: Path) -> tuple[object, ...]:
    """`MCPTools` hooks from the `mcp_servers` list; the `mcp` SDK is imported only when there is one."""
    try:
        from .mcp import from_config
    except ImportError as error:
        raise ConfigurationError(f"{file}: {where} needs the mcp SDK: pip install 'agentic-middleware[mcp]'") from error
    try:
        return from_config(entries, where)
    except ConfigurationError as error:
        raise ConfigurationError(f"{file}: {error}") from None


_NUMBERS: dict[str, Callable[[str], Any]] = {
    "max_agentic_loops": int,
    "max_body_bytes": int,
    "app_timeout": float,
    "hook_timeout": float,
    "loop_timeout": float,
    "stream_keepalive": float,
    "rerun_retries": int,
}
_FLAGS = ("sum_usage", "log_bodies", "tracing", "error_details", "streaming", "gates_see_stream")


def _mapping(value: object, where: str, file: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigurationError(f"{file}: {where} must be a mapping, got {value!r}")
    return value


def _from_env(value: Any, where: str, file: Path) -> Any:
    """Replace every `os.environ/NAME` string, as LiteLLM's configs write it, with the variable's value."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        name = value.removeprefix(ENV_PREFIX)
        if name not in os.environ:
            raise ConfigurationError(f"{file}: {where} names the environment variable {name}, which is not set")
        return os.environ[name]
    if isinstance(value, list):
        return [_from_env(item, f"{where}[{number}]", file) for number, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _from_env(item, f"{where}.{key}", file) for key, item in value.items()}
    return value


def merged(settings: Settings, **options: Any) -> Settings:
    """`settings` with the options given in code, which win over the file's."""
    return replace(settings, **{name: value for name, value in options.items() if value is not None})
