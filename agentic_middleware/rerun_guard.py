"""The guardrails on each rerun: what a round added to the conversation is judged before the model reads it.

The pre-call guardrails judge the client's request once, before the first call (precall.py). A rerun's body holds
more: the model's own turn and what the server's tools answered it (`ServerTools`, MCP servers, the served web
search), words from outside that no one judged (an injected instruction in a fetched page, a word a guardrail
blocks). So before each rerun is sent, the same guardrails judge the messages (on Responses, the input items) the
round added, given as a request of those alone: the history before them was judged already (the client's by the
first call, the rest by earlier rounds), and judging it again would cost each round a guardrail call over the
whole conversation, growing with it. A refusal ends the turn as the first request's does (its status and message
in the route's error shape; on a stream the route's error event); a mask is written into the rerun body, and so
into the history every later round and a stored Responses turn keep.

What counts as added: the messages after the longest run of leading messages that are the very objects of the
previous body's (the history a round patch carries over is its own objects: `asking.patched`). A hook that rewrote
the history (a compression stub) makes what follows its first rewritten message count as added, judged again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .precall import caller_hash, judge
from .precall_kwargs import HookKwargs

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging, BoundHook


def added_from(items: list[Any], previous: Any) -> int:
    """Where the messages a round added begin: after those that are the previous body's own, in order."""
    start, limit = 0, min(len(items), len(previous)) if isinstance(previous, list) else 0
    while start < limit and items[start] is previous[start]:
        start += 1
    return start


async def judged_rerun(
    hooks: Sequence[BoundHook],
    body: dict[str, Any],
    previous: Any,
    *,
    field: str,
    stream: bool,
    api_surface: str,
    provider: str,
    call_id: str,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
    state: Mapping[str, Any],
) -> dict[str, Any]:
    """The rerun body after the guardrails judged what its round added (`previous`: the last body's messages);
    the body itself when nothing was added or nothing changed. A refusal raises `RequestRefused`."""
    items = body.get(field)
    if not isinstance(items, list):
        return body
    start = added_from(items, previous)
    if start == len(items):
        return body
    added = items[start:]
    # Given as a request of the added messages alone: no system prompt, instructions, tools or schema (judged with
    # the client's request, and unchanged by a round), so that no edit of theirs can land outside the added ones.
    kwargs = HookKwargs({"model": body.get("model"), field: added})
    if (caller := caller_hash(state)) is not None:
        kwargs["user_api_key_hash"] = caller
    kwargs.update(stream=stream, litellm_call_id=call_id, custom_llm_provider=provider, litellm_logging_obj=logging_obj)
    await judge(hooks, kwargs, api_surface, logging_obj, call)
    judged = kwargs.get(field)
    if judged is added or not isinstance(judged, list):
        return body  # unchanged, or edited in place: the added messages are the body's own objects
    return {**body, field: [*items[:start], *judged]}
