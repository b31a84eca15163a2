"""`python -m agentic_middleware.gateway`, the same as the `agentic-gateway` command."""

from .cli import run

run()
