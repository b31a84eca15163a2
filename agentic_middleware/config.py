"""The middleware's configuration: `Settings` given in code, by dotted path, or read from a YAML file.

`Settings` and its checks are in `settings.py`, hooks by dotted path in `dotted.py`; here is the YAML file
(`load_config`: LiteLLM's `litellm_settings.callbacks` and the `agentic_middleware` section, `os.environ/`
values, the shipped tools and MCP servers by name), and the warning when LiteLLM runs the same hooks itself. The
names users import from here (`Settings`, `load_config`, `merged`, the defaults) stay importable from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

from .dotted import import_callable, resolve_hooks
from .errors import ConfigurationError
from .settings import DEFAULT_MAX_AGENTIC_LOOPS as DEFAULT_MAX_AGENTIC_LOOPS
from .settings import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
from .settings import DEFAULT_RERUN_RETRIES as DEFAULT_RERUN_RETRIES
from .settings import DEFAULT_ROUTES as DEFAULT_ROUTES
from .settings import PER_CALL_HEADERS as PER_CALL_HEADERS
from .settings import Settings as Settings
from .settings import loop_limit as loop_limit
from .settings import merged as merged

__all__ = [
    "DEFAULT_MAX_AGENTIC_LOOPS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_RERUN_RETRIES",
    "DEFAULT_ROUTES",
    "PER_CALL_HEADERS",
    "Settings",
    "load_config",
    "loop_limit",
    "merged",
    "resolve_hooks",
    "warn_if_litellm_runs",
]

logger = logging.getLogger("agentic_middleware")

SECTION = "agentic_middleware"
ENV_PREFIX = "os.environ/"
MCP_SERVERS = "mcp_servers"  # builds `MCPTools` hooks (agentic_middleware.mcp)
BUILTIN_TOOLS = "builtin_tools"  # the shipped tools by name (agentic_middleware.builtin)


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
    # A null option is one not given, as None is for the middleware's keyword arguments: its default.
    options = {
        name: _from_env(value, f"{SECTION}.{name}", file) for name, value in section.items() if value is not None
    }
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
    for name in ("on_round", "caller", "tool_policy"):
        if isinstance(options.get(name), str):
            options[name] = import_callable(options[name], f"{SECTION}.{name} in {file}", file.parent)
    if options.get("chain_store") is not None:
        options["chain_store"] = _chain_store(options["chain_store"], f"{SECTION}.chain_store", file)
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


def _chain_store(value: object, where: str, file: Path) -> Any:
    from .chains import chain_store_from_config  # the chain store's module, and Redis's, only for a config naming one

    try:
        return chain_store_from_config(value, where)
    except ConfigurationError as error:
        raise ConfigurationError(f"{file}: {error}") from None


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
