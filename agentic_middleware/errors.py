"""The package's errors: mistakes in set-up, and failures that end a request's loop."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """The middleware is set up wrongly; raised when it is built, so a gateway fails at start."""


class LoopError(Exception):
    """Ends a request's loop; the caller gets `status` with this message in the route's error shape."""

    status = 500
    code = "agentic_loop_error"


class HookError(LoopError):
    """A hook raised, or answered with something that is not what its method must return."""

    code = "agentic_hook_error"

    def __init__(self, hook: str, method: str, detail: str) -> None:
        super().__init__(f"agentic hook {hook}.{method} failed: {detail}")
        self.hook = hook
        self.method = method


class ModelAppError(LoopError):
    """The wrapped model app raised, or ended a call without a complete response."""

    code = "model_app_error"
