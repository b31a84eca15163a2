"""The guardrails on each rerun: what a round changed in the conversation is judged before the model reads it.

The pre-call guardrails judge the client's request once, before the first call (precall.py). A rerun's body holds
more: the model's own turn and what the server's tools answered it (`ServerTools`, MCP servers, the served web
search), words from outside that no one judged (an injected instruction in a fetched page, a word a guardrail
blocks), and whatever a hook's plan wrote elsewhere (a `system` or `instructions` set through `optional_params`, an
earlier message edited in place). So before each rerun is sent, the same guardrails judge what differs from the
last body the app was sent, given as a request of those parts alone: the messages (on Responses, the input items)
from the first one that differs, and each text-bearing field (`TEXT_FIELDS`) whose value differs. What is as the app
last read it was judged already (the client's by the first call, the rest by earlier rounds), and judging it again
would cost each round a guardrail call over the whole conversation, growing with it. A refusal ends the turn as the
first request's does (its status and message in the route's error shape; on a stream the route's error event); a
mask is written into the rerun body, and so into the history every later round and a stored Responses turn keep.

"Differs" is by value, against the last body as it was sent (its bytes, read again), not against the objects the
loop holds: a hook may edit those in place through any reference it kept, and the edit is sent (docs/loop.md).
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .precall import caller_hash, judge
from .precall_kwargs import BODY_FIELDS, HookKwargs, copied

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging, BoundHook

# The fields besides the messages whose words the guardrails read (guardrail_texts.py) or whose declarations they
# are given (`tools`): a round that changes one has it judged again.
TEXT_FIELDS = (
    *("system", "instructions", "tools", "tool_choice", "response_format", "text", "prompt", "output_format"),
    "output_config",
)

_ABSENT = object()


def same(value: Any, sent: Any) -> bool:
    """The value is what the app was sent (read back from its bytes): JSON's equality, in C for dicts and lists. A
    hook's object that is not JSON (or whose equality fails) is not the same: judged."""
    try:
        return bool(value == sent)
    except Exception:
        return False


def added_from(items: list[Any], sent: Any) -> int:
    """Where the messages a round changed begin: after the leading ones equal to the last body's as sent."""
    start, limit = 0, min(len(items), len(sent)) if isinstance(sent, list) else 0
    while start < limit and same(items[start], sent[start]):
        start += 1
    return start


def _kept(new: Any, given: tuple[Any, ...]) -> bool:
    """The list of messages given still holds the very ones it was given (a mask written into them is the body's
    already); a guardrail that replaced one of them in the list, or dropped or added one, changed it."""
    return isinstance(new, list) and len(new) == len(given) and all(map(operator.is_, new, given))


async def judged_rerun(
    hooks: Sequence[BoundHook],
    body: dict[str, Any],
    wire: Mapping[str, Any],
    sent: Mapping[str, Any],
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
    """The rerun body after the guardrails judged what its round changed; the body itself when nothing changed or
    the guardrails changed nothing. `wire`: the body as the rerun will send it (the tools the policy leaves);
    `sent`: the last body the app was sent, parsed from its bytes. A refusal raises `RequestRefused`."""
    given: dict[str, Any] = {}
    items, start = wire.get(field), 0
    if isinstance(items, list):
        start = added_from(items, sent.get(field))
        if start < len(items):
            given[field] = items[start:]
    elif items is not None and not same(items, sent.get(field, _ABSENT)):
        given[field] = items  # not a list (a Responses `input` a hook set as a string): judged whole
    for name in TEXT_FIELDS:
        if name != field and name in wire and not same(wire[name], sent.get(name, _ABSENT)):
            given[name] = wire[name]
    if not given:
        return body
    # Given as a request of the changed parts alone, so that no edit of the guardrails' can land outside them: the
    # messages are the body's own objects (a mask written in place is the body's), the other fields deep copies,
    # as the first request's are given, taken back where a guardrail changed them.
    memo: dict[int, Any] = {}
    kwargs = HookKwargs({"model": wire.get("model")})
    for name, value in given.items():
        kwargs[name] = value if name == field else copied(value, memo)
    copies = dict(kwargs)
    messages = tuple(given.get(field) or ()) if isinstance(items, list) else ()  # the list given may be edited
    if (caller := caller_hash(state)) is not None:
        kwargs["user_api_key_hash"] = caller
    kwargs.update(stream=stream, litellm_call_id=call_id, custom_llm_provider=provider, litellm_logging_obj=logging_obj)
    await judge(hooks, kwargs, api_surface, logging_obj, call)
    judged = body
    for name, value in given.items():
        new = kwargs.get(name)
        if new is None and name not in BODY_FIELDS:
            continue  # a schema or prompt field is taken back only when changed, as on the first call
        if new is not None and new is copies[name] and (_kept(new, messages) if name == field else same(new, value)):
            continue  # unchanged, or edited in place: the messages are the body's own objects
        if judged is body:
            judged = dict(body)
        if new is None:  # dropped by a guardrail, as the first call drops it (`precall`): none of it is sent
            if name == field and isinstance(items, list):
                judged[field] = items[:start]
            else:
                judged.pop(name, None)
        elif name == field and isinstance(items, list) and isinstance(new, list):
            judged[field] = [*items[:start], *new]
        elif name != field or not isinstance(items, list):
            judged[name] = new  # the judged copy: what a mask changed, written where the word was
    return judged
