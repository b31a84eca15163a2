"""`agentic-gateway`: the agentic middleware in front of a model server, with server tools from a YAML config.

    agentic-gateway --upstream http://localhost:8000/v1 --config tools.yaml      # in front of vLLM
    agentic-gateway --demo                                                       # the scripted demo, then exit

Every flag also comes from an environment variable (environment.py lists them); a flag wins over its variable.
The config and the upstream are checked here, once, before uvicorn starts (and restarts) workers, so a mistake
stops the start with its own message.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from ..config import Settings, load_config
from ..errors import ConfigurationError
from . import environment as env
from .access import gateway_keys
from .app import DEMO_CONFIG
from .metrics import MULTIPROCESS_VARIABLE
from .paths import unjudged_described

PROG = "agentic-gateway"
BIND_FAILED = 3  # uvicorn's own exit status when it cannot bind


def _number(least: int, most: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}, got {value}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    variables = os.environ
    found = argparse.ArgumentParser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n")[0],
        epilog=(
            "Keys come from the environment only: AGENTIC_UPSTREAM_API_KEY (or AGENTIC_ANTHROPIC_UPSTREAM_API_KEY / "
            "AGENTIC_OPENAI_UPSTREAM_API_KEY) replaces the client's key on the way up; AGENTIC_GATEWAY_API_KEYS "
            "(comma-separated) are the keys a client must send. /health and /metrics are the gateway's own."
        ),
    )
    add = found.add_argument
    add(
        "--upstream",
        default=variables.get(env.UPSTREAM),
        help=f"model server base URL, with or without /v1 [{env.UPSTREAM}]",
    )
    add(
        "--anthropic-upstream",
        default=variables.get(env.ANTHROPIC_UPSTREAM),
        help=f"where /v1/messages goes, if not to --upstream [{env.ANTHROPIC_UPSTREAM}]",
    )
    add(
        "--openai-upstream",
        default=variables.get(env.OPENAI_UPSTREAM),
        help=f"where the OpenAI routes go, if not to --upstream [{env.OPENAI_UPSTREAM}]",
    )
    add(
        "--config",
        default=variables.get(env.CONFIG),
        help=f"YAML config: hooks, builtin_tools, mcp_servers, limits [{env.CONFIG}]",
    )
    add(
        "--host",
        default=variables.get(env.HOST, "127.0.0.1"),
        help=f"address to listen on (default %(default)s) [{env.HOST}]",
    )
    add(
        "--port",
        type=_number(0, 65535),
        default=variables.get(env.PORT, "8000"),
        help=f"port (default %(default)s; 0: any free one) [{env.PORT}]",
    )
    add(
        "--workers",
        type=_number(1),
        default=variables.get(env.WORKERS, "1"),
        help=f"uvicorn worker processes (default %(default)s) [{env.WORKERS}]",
    )
    add(
        "--shutdown-timeout",
        type=_number(0),
        default=variables.get(env.SHUTDOWN_TIMEOUT, "30"),
        help=(
            "seconds requests in flight get to finish after SIGTERM or Ctrl-C before they are cut "
            f"(default %(default)s) [{env.SHUTDOWN_TIMEOUT}]"
        ),
    )
    add(
        "--gc-threshold",
        type=_number(0, env.MAX_GC_THRESHOLD),
        default=variables.get(env.GC_THRESHOLD, str(env.DEFAULT_GC_THRESHOLD)),
        help=(
            "allocations between two young-generation collections of the garbage collector: with thousands of held "
            "streams, Python's 700 has full collections walk them all again and again "
            f"(default %(default)s; 0: Python's own) [{env.GC_THRESHOLD}]"
        ),
    )
    add(
        "--demo",
        action="store_true",
        help="run one request per route with the official SDKs against the demo model, print them, exit",
    )
    add("--no-access-log", action="store_true", help="do not log every request")
    return found


def run() -> None:
    """The console script: `main`, and after `--demo` an exit without the interpreter's tear-down. The demo has
    stopped its servers by then, and unloading the SDKs' some 4,600 modules took about 1.2 s after the last line."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    if args.demo:
        from .demo import demo

        try:
            asyncio.run(demo(args.config or DEMO_CONFIG))
        except ConfigurationError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return 1
        return 0
    # What each worker's `app_from_env` reads: the flags, written into the environment the workers inherit.
    for name, value in (
        (env.UPSTREAM, args.upstream),
        (env.ANTHROPIC_UPSTREAM, args.anthropic_upstream),
        (env.OPENAI_UPSTREAM, args.openai_upstream),
        (env.CONFIG, args.config),
        (env.GC_THRESHOLD, str(args.gc_threshold)),
    ):
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    config = env.config_path()
    try:
        # A mistake in the config stops the start here, once, with its own message.
        settings = load_config(config) if config is not None else Settings()
        model = env.model_from_env()  # likewise a bad upstream
        keys = gateway_keys(os.environ.get(env.GATEWAY_KEYS))  # and keys that are set but blank
    except (ConfigurationError, ValueError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    if env.replaces_keys() and not keys and not _loopback(args.host):
        print(
            f"{PROG}: error: an upstream API key is set and --host {args.host} is reachable from other machines: "
            f"set {env.GATEWAY_KEYS} so that only your clients spend the key, or listen on 127.0.0.1",
            file=sys.stderr,
        )
        return 1
    problem = _cannot_listen(args.host, args.port)
    if problem is not None:  # one line of ours, before any worker starts, rather than uvicorn's start-up and stop
        print(f"{PROG}: error: cannot listen on {args.host}:{args.port}: {problem}", file=sys.stderr)
        return BIND_FAILED
    metrics_folder = None  # a folder of ours for the workers' metrics, removed at exit (not one the operator named)
    if args.workers > 1 and not os.environ.get(MULTIPROCESS_VARIABLE):
        metrics_folder = os.environ[MULTIPROCESS_VARIABLE] = tempfile.mkdtemp(prefix="agentic-gateway-metrics-")
    behind = _described(model)
    tools = f"tools from {config}" if config is not None else "no --config: forwarding only, no server tools"
    workers = f", {args.workers} workers" if args.workers > 1 else ""
    print(f"gateway on http://{args.host}:{args.port}{workers} in front of {behind}; {tools}", flush=True)
    print(f"{unjudged_described(settings)} (GET, HEAD, OPTIONS and DELETE on any path go up as sent)", flush=True)
    try:
        _serve(args)
    finally:
        if metrics_folder is not None:
            shutil.rmtree(metrics_folder, ignore_errors=True)
            os.environ.pop(MULTIPROCESS_VARIABLE, None)
    return 0


def _cannot_listen(host: str, port: int) -> str | None:
    """Why uvicorn could not listen on `host:port` (a port in use, a host that does not resolve or is not this
    machine's), tried as it binds (every address the host resolves to, `SO_REUSEADDR`); None when it can. Port 0
    always can. uvicorn binds again after this: a port taken in between is still its own one `ERROR:` line."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as error:
        return f"the host does not resolve ({error.strerror or error})"
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as error:
                return (error.strerror or str(error)).lower()
    return None


def _described(model: Any) -> str:
    from .upstream import Upstream, Upstreams

    if isinstance(model, Upstreams):
        return f"{model.anthropic.base_url} (Anthropic's API) and {model.openai.base_url} (OpenAI's)"
    if isinstance(model, Upstream):
        return model.base_url + (" (upstream key set)" if model.api_key else "")
    return f"the scripted demo model (no --upstream, {env.UPSTREAM} unset)"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    uvicorn.run(
        "agentic_middleware.gateway.environment:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        access_log=not args.no_access_log,
        timeout_graceful_shutdown=args.shutdown_timeout,  # else one hung upstream holds a stop for its 600 s
        ws="none",  # the gateway serves no websockets: not importing a websocket library shortens the start
    )


if __name__ == "__main__":
    run()
