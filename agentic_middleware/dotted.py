"""Hooks and callables named by dotted path (`my_module.my_hook`), as configs name them; checked when loaded."""

from __future__ import annotations

import importlib
import logging
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from .errors import ConfigurationError
from .hooks import BoundHook

logger = logging.getLogger("agentic_middleware")


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


def import_callable(path: str, where: str, folder: Path | None) -> object:
    if "." not in path:
        raise ConfigurationError(f"{where} must be a dotted path such as my_module.record_round, got {path!r}")
    return _import_path(path, where, folder)
