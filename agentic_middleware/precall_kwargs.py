"""The pre-call lifecycle's `kwargs`: what a client's body gives the hooks, and which keys the hooks set.

The hooks' `kwargs` hold the client's fields (a LiteLLM hook reads `tools`, `metadata`, `stream` there) beside the
keys the server and the hooks set (`user_api_key_hash`, a sandbox key, an emit flag), which every round's hooks get.
The client writes its body, never those keys: so a key the server or a hook set is carried on whatever the client's
body holds under the same name, and a client field reaches no round. Telling the two apart by value cannot work
(`True`, `None`, a small number or a one-letter string is the one object Python has of it, so a hook setting one
looks like the client's left alone): `HookKwargs` records each name written into it, and of a new dict a hook
returns instead, each name whose value is not the very object it was given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The request fields a pre-call hook may change; other changes stay in its kwargs.
BODY_FIELDS = ("system", "messages", "input", "instructions", "tools", "tool_choice")

# Keys the middleware gives the pre-call hooks that are not request parameters and are not carried on.
GIVEN = frozenset(
    ("stream", "stream_options", "litellm_call_id", "custom_llm_provider", "litellm_logging_obj", "litellm_params")
)

# Carried by none: the request fields above, and those the pre-request hook gets as arguments.
_NOT_CARRIED = GIVEN | frozenset(BODY_FIELDS) | {"model", "messages"}


class HookKwargs(dict[str, Any]):
    """A dict that records each name written into it (`written`): item assignment, `update`, `|=`, and `setdefault`
    when it adds the name. Deleting writes nothing."""

    def __init__(self, items: Mapping[str, Any], written: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.written = set(written)

    def __setitem__(self, name: str, value: Any) -> None:
        self.written.add(name)
        super().__setitem__(name, value)

    def update(self, *items: Any, **named: Any) -> None:
        new = dict(*items, **named)
        self.written.update(new)
        super().update(new)

    def __ior__(self, other: Any) -> HookKwargs:  # type: ignore[override,misc]
        self.update(other)
        return self

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self.written.add(name)
        return super().setdefault(name, default)


def is_identity(name: str) -> bool:
    """Fields that name the caller in LiteLLM's proxy, or hold what does: only the gateway may set them. LiteLLM's
    proxy builds `litellm_params` itself (its `metadata` carries the key's `user_api_key_*`); a client's, left in
    the pre-call kwargs, would be the one a pre-request hook is given on `/v1/messages`, in place of the server's."""
    return name.startswith("user_api_key") or name in ("litellm_metadata", "litellm_params")


def _never_given(name: str) -> bool:
    """A client field the hooks are not given (it still reaches the app in the body): one naming the caller, and one
    with a leading `_`, the names hooks keep their own keys under (LiteLLM's `_websearch_interception_*`,
    `_code_interpreter_interception_*`...), never a request parameter of these APIs."""
    return is_identity(name) or name.startswith("_")


def client_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's fields as the pre-call hooks get them: without those `_never_given` names; `metadata` a copy
    without `user_api_key_*` keys, so that a hook's records stay out of the body."""
    fields = {name: value for name, value in body.items() if not _never_given(name)}
    metadata = fields.get("metadata")
    if isinstance(metadata, dict):
        fields["metadata"] = {name: value for name, value in metadata.items() if not is_identity(name)}
    return fields


def returned(result: dict[str, Any], given: HookKwargs) -> HookKwargs:
    """The kwargs a hook returned, recording what it wrote: the names written into `given` before, and each name of
    `result` that `given` lacks or whose value is not the very object `given` holds (a copy of the kwargs changes
    nothing). Only a client field that is not one of `_never_given`'s can be taken for left alone when a hook sets
    it anew to Python's one `True` (a small number...) the client sent: LiteLLM's hooks keep their keys under `_`."""
    if result is given:
        return given
    written = set(given.written)
    if isinstance(result, HookKwargs):
        written |= result.written
    written.update(name for name, value in result.items() if name not in given or value is not given[name])
    return HookKwargs(result, written)


def carried(kwargs: HookKwargs, client: Mapping[str, Any]) -> dict[str, Any]:
    """The keys every round's hooks get: each the server or a hook set (`client`: the fields the client's body gave
    the hooks), never a client field left as it was given, nor a request field (`_NOT_CARRIED`)."""
    return {
        name: value
        for name, value in kwargs.items()
        if name not in _NOT_CARRIED and (name not in client or name in kwargs.written)
    }
