"""The package's errors: mistakes in set-up, and failures that end a request's loop."""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import orjson
from starlette.exceptions import HTTPException


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

    A guardrail or pre-call hook that says no the LiteLLM way (an HTTP exception: `refusal_of`) refuses with its
    own `status` and `headers` (a 403, a 429 with `retry-after`...).

    `param` names the request field at fault (`tools[0].allowed_domains`), for the OpenAI routes' `error.param`.
    It is the client's doing, not a fault of the gateway: it is logged as a WARNING, without a traceback.
    """

    status = 400
    code = "invalid_request"
    ended_by = "invalid_request"

    def __init__(
        self,
        message: str,
        status: int = 400,
        headers: Iterable[tuple[bytes, bytes]] = (),
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.summary = message
        self.status = status
        self.code = refusal_code(status)
        self.headers = list(headers)
        self.param = param


def refusal_code(status: int) -> str:
    """The error code of a refusal with this status, so that a 403 or a 429 does not claim to be a bad request:
    `invalid_request` for 400 and 422, `request_too_large` for 413 (as the middleware's own), OpenAI's
    `rate_limit_exceeded` for 429, else the status's HTTP name (`unauthorized`, `forbidden`, `not_found`,
    `service_unavailable`...)."""
    if status in _REFUSAL_CODES:
        return _REFUSAL_CODES[status]
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "invalid_request" if status < 500 else "refused"


_REFUSAL_CODES = {400: "invalid_request", 413: "request_too_large", 422: "invalid_request", 429: "rate_limit_exceeded"}


class ModelAppError(LoopError):
    """The wrapped model app raised, or ended a call without a complete response."""

    code = "model_app_error"
    summary = "the model app failed"
    transient = False  # the app raised or broke off, which a retry of a rerun may mend (`retries.py`)


class ModelAppTimeout(ModelAppError):
    """One call of the model app took longer than `app_timeout`."""

    status = 504
    code = "model_app_timeout"
    ended_by = "timeout"
    summary = "the model app timed out"
    transient = True  # the late call was cancelled: a rerun is sent again, as when the app itself answers 504


class LoopCancelled(LoopError):
    """The request's task was cancelled from outside, as a server does to requests still running at shut-down."""

    status = 503
    code = "agentic_loop_cancelled"
    ended_by = "cancelled"
    summary = "the request was cancelled: the server is stopping"


def refusal_of(error: BaseException | None) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
    """(status, message, headers) when an exception says no with an HTTP status, else None.

    Those are Starlette's `HTTPException` (FastAPI's subclasses it), which LiteLLM's guardrails raise to block, and
    LiteLLM's own exceptions that carry a `status_code` (`GuardrailRaisedException`, `BlockedPiiEntityError`,
    `litellm.exceptions.*` such as `BadRequestError` or `RateLimitError`), found by their module so that LiteLLM
    need not be imported. Any other exception, one with a `status_code` of its own included (an HTTP client's error
    from a service a hook calls), is a hook failure, not a refusal.
    """
    status: Any
    detail: Any
    if isinstance(error, HTTPException):
        status, detail, highest = error.status_code, error.detail, 599
        headers = dict(error.headers or {})
    elif any(kind.__module__ == "litellm.exceptions" for kind in type(error).__mro__):
        # A 4xx says no; LiteLLM's 5xx exceptions are failures (a service it could not reach), not refusals.
        status, detail, highest, headers = getattr(error, "status_code", None), getattr(error, "message", None), 499, {}
        detail = detail if isinstance(detail, str) else str(error)
    else:
        return None
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= highest:
        return None
    message = detail if isinstance(detail, str) else orjson.dumps(detail, default=str).decode()
    kept = [(str(name).lower(), str(value)) for name, value in headers.items()]
    return status, message, [(n.encode("latin-1"), v.encode("latin-1")) for n, v in kept if n not in _OWN_HEADERS]


# Headers of a refusal's response that are the middleware's to write, not the exception's.
_OWN_HEADERS = frozenset(("content-type", "content-length", "transfer-encoding"))
