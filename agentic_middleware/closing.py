"""The closing answer: what the client gets when the loop may not rerun (the limit, or a call that already ran).

By default the loop makes one more call of the model app, the closing call: the calls the hooks claimed are answered
with a result that says why they did not run, and tools are off for that call, so the model ends its turn in words
with what it has, as other agents do with a last tool-less turn. An empty answer would break clients that reject one
(pydantic-ai) and the next request of those that store it as history (Anthropic wants content in every turn but
the last). `closing="text"` ends at once instead: the answer without the claimed calls, with `closing_text` where
nothing else would be left.
"""

from __future__ import annotations

from typing import Any

from .surfaces import Claims, Surface, ToolResult, canonical

CLOSING_MODES = ("call", "text")
DEFAULT_CLOSING_TEXT = "I stopped here: the server's tools could not run again for this request."

SPENT = (
    "Not run: this request's budget of server tool calls is spent (max_agentic_loops={limit}). "
    "Answer now with what you have, without calling tools."
)
REPEATED = "Not run: the same call already ran in this request, with this result: {result}"
REPEATED_UNSEEN = "Not run: the same call already ran in this request; its result is earlier in this conversation."


def closing_body(
    surface: Surface, body: dict[str, Any], response: dict[str, Any], claims: Claims, reason: str, limit: int
) -> dict[str, Any] | None:
    """The closing call's request body; None when there is nothing to close.

    Nothing to close: the answer claims no call, or it also calls tools of the client's own, which the client gets
    (a call in words would hide them from it).
    """
    calls = surface.calls(response)
    if not calls or not all(surface.is_claimed(call, claims) for call in calls):
        return None
    claimed = claimed_calls(surface, response, claims)
    messages = surface.messages(body)
    history = messages if isinstance(messages, list) else []
    if reason == "limit":
        results = [ToolResult(SPENT.format(limit=limit), True)] * len(claimed)
    else:
        earlier = {(str(name), canonical(value)): result for name, value, result in surface.past_results(history)}
        results = [
            _repeated(earlier.get((str(surface.call_name(call)), canonical(surface.call_input(call)))))
            for call in claimed
        ]
    return surface.tools_off(answered(surface, body, response, claimed, results))


def claimed_calls(surface: Surface, response: dict[str, Any], claims: Claims) -> list[dict[str, Any]]:
    """The claimed calls of the answer as the app sent it, of the one alternative that has any (chat's `n` > 1:
    one conversation goes on)."""
    ids = {id(call) for call in surface.calls(response) if surface.is_claimed(call, claims)}
    group = next((group for group in surface.call_groups(response) if any(id(call) in ids for call in group)), [])
    return [call for call in group if id(call) in ids]


def answered(
    surface: Surface,
    body: dict[str, Any],
    response: dict[str, Any],
    claimed: list[dict[str, Any]],
    results: list[ToolResult],
) -> dict[str, Any]:
    """The next request body: the history, the assistant turn with only the claimed calls, and their results."""
    messages = surface.messages(body)
    history = messages if isinstance(messages, list) else []
    conversation = [*history, *surface.follow_up(response, claimed, results)]
    return surface.rerun_body({**body, surface.messages_field: conversation})


def _repeated(result: Any) -> ToolResult:
    if isinstance(result, list):  # content blocks: their text
        result = "".join(block.get("text", "") for block in result if isinstance(block, dict))
    if not result:
        return ToolResult(REPEATED_UNSEEN, True)
    return ToolResult(REPEATED.format(result=result), True)
