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

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

# The request fields a pre-call hook may change; other changes stay in its kwargs.
BODY_FIELDS = ("system", "messages", "input", "instructions", "tools", "tool_choice")

# Keys the middleware gives the pre-call hooks that are not request parameters and are not carried on.
GIVEN = frozenset(
    (
        "stream",
        "stream_options",
        "litellm_call_id",
        "custom_llm_provider",
        "litellm_logging_obj",
        "litellm_params",
        "proxy_server_request",
    )
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


SERVER_SET = frozenset({"scope", "secret_fields", "proxy_server_request", "headers"})
"""Keys only the server sets: `scope`, which the loop gives every round's hooks as the ASGI scope (whose `state`
holds the caller); `secret_fields` and `proxy_server_request`, which LiteLLM's proxy always overwrites with the
request's own headers and URL, and which LiteLLM code reads as the server's (`secret_fields["raw_headers"]` for a
per-user upstream credential, `proxy_server_request["headers"]`); and `headers`, which LiteLLM's guardrails read as
the inbound headers when `proxy_server_request` has none. A client's are dropped: a hook that trusts them would get
the client's forgery. The middleware builds `proxy_server_request` itself (precall_request.py), never
`secret_fields` (the raw headers, credentials included) nor `headers` (LiteLLM's are the headers it forwards up)."""

# `metadata` keys LiteLLM's proxy always writes itself, or strips from a client's as its own controls (guardrail
# opt-outs, the names of guardrails already applied, a guardrail's own records): a client's never reach the hooks.
PROXY_METADATA = frozenset(
    (
        "headers",
        "endpoint",
        "requester_ip_address",
        "user_agent",
        "requester_metadata",
        "litellm_received_at",
        "litellm_api_version",
        "litellm_parent_otel_span",
        "llm_api_timing_windows",
        "disable_global_guardrails",
        "disable_global_guardrail",
        "opted_out_global_guardrails",
        "applied_guardrails",
        "applied_policies",
        "policy_sources",
        "guardrail_scan_ids",
        "guardrail_scan_metadata",
        "routing_decision",
        "standard_logging_object",
        "proxy_server_request",
        "secret_fields",
        "client_disconnected",
        "error_information",
    )
)


def is_proxy_metadata(name: str) -> bool:
    """A `metadata` key only LiteLLM's proxy writes: `PROXY_METADATA`, a `_`-prefixed one (its internal state, as
    `_pipeline_managed_guardrails`), and Pillar's records (`pillar_*`), which the proxy strips from a client's."""
    return name in PROXY_METADATA or name.startswith(("_", "pillar_"))


def _never_given(name: str) -> bool:
    """A client field the hooks are not given (it still reaches the app in the body): one naming the caller; one with
    a leading `_`, the names hooks keep their own keys under (LiteLLM's `_websearch_interception_*`,
    `_code_interpreter_interception_*`...), never a request parameter of these APIs; and the keys only the server
    sets (`SERVER_SET`)."""
    return is_identity(name) or name.startswith("_") or name in SERVER_SET


def client_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's fields as the pre-call hooks get them: without those `_never_given` names. The fields whose
    changes are applied (`BODY_FIELDS`) are the body's own; the others are deep copies, since what a hook changes of
    them stays in its kwargs, however deep (`thinking`, `response_format`, its records in `metadata`). `metadata`
    is without `user_api_key_*` keys and those only LiteLLM's proxy writes (`is_proxy_metadata`), sent as text
    too: a JSON object in a string is given decoded, as LiteLLM's proxy decodes it (a client that can only send
    text, through a form or `extra_body`) before dropping those keys."""
    memo: dict[int, Any] = {}
    fields = {
        name: value if name in BODY_FIELDS else copied(value, memo)
        for name, value in body.items()
        if not _never_given(name)
    }
    metadata = fields.get("metadata")
    if isinstance(metadata, str):
        try:
            decoded = orjson.loads(metadata)
        except orjson.JSONDecodeError:
            decoded = None
        metadata = decoded if isinstance(decoded, dict) else metadata
    if isinstance(metadata, dict):
        fields["metadata"] = {
            name: value for name, value in metadata.items() if not is_identity(name) and not is_proxy_metadata(name)
        }
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


def copied(value: Any, memo: dict[int, Any]) -> Any:
    """`value` copied deep: the JSON of the request (dicts, lists) here, in one pass; another object by `deepcopy`,
    or shared when it cannot be copied. `memo`: what is copied already (an object met twice is copied once)."""
    if type(value) is dict:
        if id(value) in memo:
            return memo[id(value)]
        new: dict[Any, Any] = {}
        memo[id(value)] = new
        for name, item in value.items():
            new[name] = copied(item, memo)
        return new
    if type(value) is list:
        if id(value) in memo:
            return memo[id(value)]
        new_list: list[Any] = []
        memo[id(value)] = new_list
        new_list.extend(copied(item, memo) for item in value)
        return new_list
    if value is None or type(value) in (str, int, float, bool):
        return value
    try:
        return copy.deepcopy(value, memo)
    except Exception:  # a lock, a client, a generator...: shared, as the logging object is
        return value
