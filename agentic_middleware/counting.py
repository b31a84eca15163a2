"""Token counts that count what the model would be sent: the server's tools included.

`POST <Messages route>/count_tokens` (Anthropic's `messages.count_tokens`) and `POST <Responses route>/input_tokens`
(OpenAI's `responses.input_tokens.count`) take the body of a request of their route, and answer how many input tokens
it holds. The loop adds tools to that request (`ServerTools`, `MCPTools`), so a count of the client's body alone
would come out short: the body goes to the app with the tools declared as the route's own request of the same body
would get them, by the same hooks and the same rules (side requests get none: side.py). Only the tool hooks'
declarations run (the `ServerTools` family's request hook): no other hook, guardrail or pre-call is asked, as a count
runs no model. A Responses count that names a recorded turn by `previous_response_id` is chained as follow-ups are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import read_body, replay, scope_with_body_length, send_json
from .chains import Chains
from .ends import REQUEST_HOOK, has_internal_fields, is_internal_field, without_internal_fields
from .errors import HookError, RequestRefused
from .followups import resume_beside
from .hooks import AgenticLoopLogging, BoundHook
from .payload import client_fault
from .policy import ToolPolicy, client_own, scoped
from .precall_request import model_call_details
from .surfaces import Surface
from .tools import ServerTools

logger = logging.getLogger("agentic_middleware")

# The counting endpoint under a route of each wire format that has one (the last segment of its path).
COUNT_ENDPOINTS = {"messages": "count_tokens", "responses": "input_tokens"}


def tool_hooks(hooks: Sequence[BoundHook]) -> tuple[BoundHook, ...]:
    """The hooks that declare tools into requests: the `ServerTools` family (`MCPTools`, `CompressionHook` too)."""
    return tuple(hook for hook in hooks if isinstance(hook.hook, ServerTools))


async def count(
    hooks: Sequence[BoundHook],
    surface: Surface,
    provider: str,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    chains: Chains | None,
    max_body_bytes: int,
    hook_timeout: float | None,
    policy: ToolPolicy | None = None,
) -> None:
    """One counting request: its body with the server's tools declared, to the app; under a tool policy, only those
    the caller may use (none under a loop cap of 0), as its turn gets them (policy.py)."""
    request = await read_body(receive, max_body_bytes)
    if request is None:
        return  # the client left before its request was complete
    raw, complete = request
    body = None
    if complete and raw and len(raw) <= max_body_bytes:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None  # the app answers it as it answers any body it cannot read
    if type(body) is not dict:
        if len(raw) > max_body_bytes or not complete:
            logger.warning("count request over max_body_bytes=%d: counted without the server's tools", max_body_bytes)
        await app(scope, replay(raw, receive, more_body=not complete), send)
        return
    body = {name: value for name, value in body.items() if not is_internal_field(name)}
    resumed = None
    if chains is not None and surface.chains_by_id:
        resumed = await resume_beside(chains, body, scope, send, max_body_bytes)
    if resumed is not None:
        body, scope, send = resumed
    try:
        client_tools = client_own(body, policy)  # taken before any hook can change the list in place
        if policy is None or policy.max_agentic_loops != 0:
            body = await _declared(hooks, surface, provider, body, scope, hook_timeout, policy)
        if policy is not None:
            body = scoped(surface, body, client_tools, policy)
        try:
            sent = orjson.dumps(body)
        except TypeError as error:  # a hook put in the body something JSON cannot write: its error, as in a turn
            names = ", ".join(hook.name for hook in hooks)
            raise HookError(names, REQUEST_HOOK, f"the request is not JSON: {error}") from None
    except (HookError, TypeError, RecursionError) as error:
        fault = client_fault(error, raw)  # the client's body too deep to write: refused as on the route
        if isinstance(fault, RequestRefused):
            await send_json(send, 400, surface.error_body(400, fault.summary, fault.code))
            return
        if not isinstance(error, HookError):
            raise
        logger.error("counting: %s", error)
        message = "the server's tools could not be declared for the count"
        await send_json(send, 500, surface.error_body(500, message, "agentic_hook_error"))
        return
    except RequestRefused as error:
        await send_json(send, error.status, surface.error_body(error.status, error.summary, error.code, error.param))
        return
    await app(scope_with_body_length(scope, len(sent)), replay(sent, receive), send)


async def _declared(
    hooks: Sequence[BoundHook],
    surface: Surface,
    provider: str,
    body: dict[str, Any],
    scope: Scope,
    timeout: float | None,
    policy: ToolPolicy | None,
) -> dict[str, Any]:
    """The body as the tool hooks declare into it before a first call, in their order (given the caller's policy,
    as a turn's hooks are: the compression hook stubs nothing for a caller who may not retrieve)."""
    logging_obj = AgenticLoopLogging(
        litellm_call_id="count",
        route=surface.name,
        logger=logging.LoggerAdapter(logger, {"litellm_call_id": "count"}),
        model_call_details=model_call_details(body, provider, scope.get("state", {})),
    )
    kwargs = {
        "_agentic_loop_api_surface": surface.api_surface,
        "custom_llm_provider": provider,
        "scope": scope,
        "_agentic_tool_policy": policy,
    }
    for hook in hooks:
        try:
            async with asyncio.timeout(timeout):
                changed = await hook.call(
                    REQUEST_HOOK, {"request": body, "logging_obj": logging_obj, "kwargs": dict(kwargs)}
                )
        except TimeoutError:
            raise HookError(hook.name, REQUEST_HOOK, f"timed out after hook_timeout={timeout:g} s") from None
        if isinstance(changed, dict):
            body = changed
        elif changed is not None:  # as on the route (`RequestEnds.prepared`): never a count silently short
            raise HookError(hook.name, REQUEST_HOOK, f"returned {type(changed).__name__}, not a request body")
    # As `RequestEnds.on_the_wire` does for a model call: fields only trusted code may set are not counted (nor
    # sent), whether a hook returned them or added them in place to the body it was given.
    return without_internal_fields(body) if has_internal_fields(body) else body
