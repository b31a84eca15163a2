"""The package's errors: mistakes in set-up, and failures that end a request's loop."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """The middleware is set up wrongly; raised when it is built, so a gateway fails at start."""


class LoopError(Exception):
    """Ends a request's loop; the caller gets `status` with this message in the route's error shape.

    `summary` is what the caller gets instead when the operator hides error details.
    """

    status = 500
    code = "agentic_loop_error"
    ended_by = "app_error"
    summary = "the agentic loop failed"


class LoopTimeout(LoopError):
    """The whole loop took longer than `loop_timeout`."""

    status = 504
    code = "agentic_loop_timeout"
    ended_by = "timeout"
    summary = "the agentic loop timed out"


class HookError(LoopError):
    """A hook raised, timed out, or answered with something that is not what its method must return."""

    code = "agentic_hook_error"
    ended_by = "hook_error"
    summary = "an agentic hook failed"

    def __init__(self, hook: str, method: str, detail: str) -> None:
        super().__init__(f"agentic hook {hook}.{method} failed: {detail}")
        self.hook = hook
        self.method = method


class RequestRefused(LoopError):
    """A hook found the client's request wrong (a malformed history record, a filter that is not a list): the
    caller gets 400 with this message, in the route's error shape, and the app is not called again.

    The message stays whole when the operator hides error details: it names the client's own fields, nothing of the
    server's.
    """

    status = 400
    code = "invalid_request"
    ended_by = "invalid_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.summary = message


class ModelAppError(LoopError):
    """The wrapped model app raised, or ended a call without a complete response."""

    code = "model_app_error"
    summary = "the model app failed"


class ModelAppTimeout(ModelAppError):
    """One call of the model app took longer than `app_timeout`."""

    status = 504
    code = "model_app_timeout"
    ended_by = "timeout"
    summary = "the model app timed out"


class LoopCancelled(LoopError):
    """The request's task was cancelled from outside, as a server does to requests still running at shut-down."""

    status = 503
    code = "agentic_loop_cancelled"
    ended_by = "cancelled"
    summary = "the request was cancelled: the server is stopping"
