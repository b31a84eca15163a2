"""What the gateway reads from its environment: every flag of `agentic-gateway` has a variable, and each uvicorn
worker builds its app from these variables alone (`app_from_env`), so N workers build the same gateway.

| variable | flag | meaning |
|---|---|---|
| `AGENTIC_UPSTREAM` | `--upstream` | the model server's base URL, with or without `/v1`; unset: the demo model |
| `AGENTIC_ANTHROPIC_UPSTREAM` | `--anthropic-upstream` | where Anthropic's API family goes, when not to `--upstream` |
| `AGENTIC_OPENAI_UPSTREAM` | `--openai-upstream` | where OpenAI's API family goes, when not to `--upstream` |
| `AGENTIC_CONFIG` | `--config` | the YAML config (hooks, `builtin_tools`, `mcp_servers`, limits) |
| `AGENTIC_HOST`, `AGENTIC_PORT` | `--host`, `--port` | where to listen (127.0.0.1:8000) |
| `AGENTIC_WORKERS` | `--workers` | uvicorn worker processes (1) |
| `AGENTIC_SHUTDOWN_TIMEOUT` | `--shutdown-timeout` | seconds requests in flight get after SIGTERM (30) |
| `AGENTIC_GC_THRESHOLD` | `--gc-threshold` | allocations between young-generation collections (10000; 0: Python's) |
| `AGENTIC_UPSTREAM_API_KEY` | (none) | a key that replaces the client's on the way up |
| `AGENTIC_ANTHROPIC_UPSTREAM_API_KEY`, `AGENTIC_OPENAI_UPSTREAM_API_KEY` | (none) | the same, per API family |
| `AGENTIC_GATEWAY_API_KEYS` | (none) | comma-separated keys a client must send (`x-api-key` or `Bearer`) |

Keys have no flags: a flag's value is visible to every user of the machine in the process list.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from pathlib import Path

from starlette.applications import Starlette

from ..config import load_config
from .access import RequireKey, gateway_keys
from .app import DEMO_CONFIG, create_app
from .demo_model import DemoModel
from .upstream import Upstream, Upstreams
from .wire import Model

UPSTREAM = "AGENTIC_UPSTREAM"
ANTHROPIC_UPSTREAM = "AGENTIC_ANTHROPIC_UPSTREAM"
OPENAI_UPSTREAM = "AGENTIC_OPENAI_UPSTREAM"
CONFIG = "AGENTIC_CONFIG"
HOST = "AGENTIC_HOST"
PORT = "AGENTIC_PORT"
WORKERS = "AGENTIC_WORKERS"
SHUTDOWN_TIMEOUT = "AGENTIC_SHUTDOWN_TIMEOUT"
UPSTREAM_KEY = "AGENTIC_UPSTREAM_API_KEY"
ANTHROPIC_KEY = "AGENTIC_ANTHROPIC_UPSTREAM_API_KEY"
OPENAI_KEY = "AGENTIC_OPENAI_UPSTREAM_API_KEY"
GATEWAY_KEYS = "AGENTIC_GATEWAY_API_KEYS"
GC_THRESHOLD = "AGENTIC_GC_THRESHOLD"
DEFAULT_GC_THRESHOLD = 10_000
"""Measured in benchmarks case 12 (docs/performance.md): at 10,000 live streams on one worker, Python's 700 made 12 to
14 full collections walk every stream's objects, the collector 5.4 to 8.3 s of the worker's CPU and a 92 to 148 ms lag
p99; 10,000 made one or two (1.1 to 2.3 s, 36 to 62 ms)."""
MAX_GC_THRESHOLD = 2**31 - 1
"""The most `gc.set_threshold` takes (a C int): past it every worker would fail at its start, again and again."""
FLAGS = {
    UPSTREAM: "--upstream",
    ANTHROPIC_UPSTREAM: "--anthropic-upstream",
    OPENAI_UPSTREAM: "--openai-upstream",
    CONFIG: "--config",
    HOST: "--host",
    PORT: "--port",
    WORKERS: "--workers",
    SHUTDOWN_TIMEOUT: "--shutdown-timeout",
    GC_THRESHOLD: "--gc-threshold",
}


def named(variable: str) -> str:
    """A setting as an error message names it: its flag and its variable (`--upstream / AGENTIC_UPSTREAM`), as the
    operator may have given either; a key, which has no flag, by its variable."""
    return f"{FLAGS[variable]} / {variable}" if variable in FLAGS else variable


def _value(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name) or None


def model_from_env(error_details: bool = True, environ: Mapping[str, str] = os.environ) -> Model:
    """The upstream(s) the variables name, else the scripted demo model. Raises ValueError for a bad URL."""
    both = _value(environ, UPSTREAM)
    anthropic = _value(environ, ANTHROPIC_UPSTREAM) or both
    openai = _value(environ, OPENAI_UPSTREAM) or both
    if anthropic is None and openai is None:
        return DemoModel()
    if anthropic is None or openai is None:
        given = ANTHROPIC_UPSTREAM if openai is None else OPENAI_UPSTREAM
        missing = OPENAI_UPSTREAM if openai is None else ANTHROPIC_UPSTREAM
        raise ValueError(
            f"{named(given)} is set but neither {named(missing)} nor {named(UPSTREAM)}: "
            "where does the other API family go?"
        )
    shared = _value(environ, UPSTREAM_KEY)
    anthropic_key = _value(environ, ANTHROPIC_KEY) or shared
    openai_key = _value(environ, OPENAI_KEY) or shared

    def upstream(url: str, key: str | None, variable: str) -> Upstream:
        try:
            return Upstream(url, error_details=error_details, api_key=key)
        except ValueError as error:
            raise ValueError(f"{named(variable if _value(environ, variable) else UPSTREAM)}: {error}") from None

    if anthropic == openai and anthropic_key == openai_key:
        return upstream(anthropic, anthropic_key, ANTHROPIC_UPSTREAM)
    return Upstreams(
        upstream(anthropic, anthropic_key, ANTHROPIC_UPSTREAM), upstream(openai, openai_key, OPENAI_UPSTREAM)
    )


def replaces_keys(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether an upstream key replaces the clients' own: then whoever reaches the gateway spends that key."""
    return any(_value(environ, name) for name in (UPSTREAM_KEY, ANTHROPIC_KEY, OPENAI_KEY))


def config_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The config to read: AGENTIC_CONFIG; unset, the demo's in front of the demo model and none (no server tools,
    forwarding only) in front of an upstream."""
    given = _value(environ, CONFIG)
    if given is not None:
        return Path(given)
    upstreams = (UPSTREAM, ANTHROPIC_UPSTREAM, OPENAI_UPSTREAM)
    return None if any(_value(environ, name) for name in upstreams) else DEMO_CONFIG


def tune_collector(environ: Mapping[str, str] = os.environ) -> None:
    """Set the garbage collector's first threshold (`AGENTIC_GC_THRESHOLD`, else the default; 0 leaves Python's).

    Every object a held stream keeps outlives two collections and lands in the oldest generation; Python collects
    that one whole each time it has grown by a quarter, which the young collections' pace (one per 700 allocations)
    reaches again and again while thousands of streams begin. A higher first threshold makes the young collections,
    and with them the chances of a full one, that much rarer; cyclic garbage waits a little longer to be freed.
    """
    value = _value(environ, GC_THRESHOLD)
    threshold = DEFAULT_GC_THRESHOLD if value is None else int(value)
    if threshold > 0:
        gc.set_threshold(threshold, *gc.get_threshold()[1:])


def app_from_env() -> Starlette:
    """The app factory each uvicorn worker calls. Nothing is shared between workers."""
    from ..config import Settings

    tune_collector()
    path = config_path()
    settings = load_config(path) if path is not None else Settings()
    app = create_app(settings, model_from_env(settings.error_details))
    keys = gateway_keys(os.environ.get(GATEWAY_KEYS))
    if keys:
        app.add_middleware(RequireKey, keys=keys)
    return app
