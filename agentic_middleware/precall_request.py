"""What LiteLLM's proxy writes into a request's `data` from the HTTP request itself, before any guardrail runs.

LiteLLM's guardrails judge by the request's inbound headers as well as its words: its generic guardrail API
forwards named headers to the guardrail service (a per-tenant policy), Gray Swan and others read them too. They
read `proxy_server_request["headers"]` first, then a top-level `headers`, then `metadata["headers"]`; on LiteLLM's
proxy the first is always the request's own, and `metadata.headers` is overwritten with them. A client's body is
the client's to write: so its `headers`, and the `metadata` keys LiteLLM's proxy always overwrites or strips (the
headers, endpoint, IP address and user agent, the requester's metadata, the guardrail controls), never reach the
hooks (precall_kwargs's `SERVER_SET` drops the top-level ones, its `is_proxy_metadata` the others), and the server's are
given in their place, built from the ASGI scope: `proxy_server_request` (`url`, `method`, `headers`, `body`) and
`metadata`'s `headers`, `endpoint`, `requester_ip_address`, `user_agent` and `requester_metadata`.

The headers given are the request's less its credentials: the API-key headers LiteLLM's proxy takes a key from
(`authorization`, `x-api-key`, `api-key`, Google's, Azure APIM's, `x-litellm-api-key`, `x-mcp-auth`, and their
`x-pass-` forms), `proxy-authorization` and `cookie`; the `x-mcp-{server}-{header}` family LiteLLM's proxy drops
(`x-mcp-servers` and `x-mcp-access-groups` are kept); and any header whose name holds a word LiteLLM's masking
reads as a secret's (`key`, `token`, `secret`, `authorization`, `credential`, `password`, `passwd`), with `_` read
as `-`. LiteLLM's proxy masks their values; here they are left out,
since no guardrail should judge by a secret, and the guardrail service a guardrail forwards headers to is another
party. A header sent more than once is given once, its values joined by ", " (HTTP's own reading), so that a
second copy cannot stand in for the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .precall_kwargs import copied

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging

# The request headers LiteLLM's proxy reads a caller's key from, and the other credential headers it masks.
_CREDENTIALS = frozenset(
    (
        "authorization",
        "api-key",
        "x-api-key",
        "x-goog-api-key",
        "ocp-apim-subscription-key",
        "x-litellm-api-key",
        "x-mcp-auth",
        "proxy-authorization",
        "cookie",
    )
)


# The keys the server gives the pre-call hooks beside the client's fields (precall.run_pre_call), which a client's
# field of the same name, in any case, must not stand for in `proxy_server_request.body`.
_SERVER_KEYS = frozenset(("litellm_call_id", "custom_llm_provider", "litellm_logging_obj", "litellm_params"))


def _servers(name: str) -> bool:
    lower = name.lower()
    return lower in _SERVER_KEYS or lower.startswith("user_api_key") or lower == "litellm_metadata"


# Words that make a header name a credential's, as LiteLLM's masking reads a name (`has_sensitive_keyword`).
_SECRET_WORDS = ("authorization", "token", "key", "secret", "credential", "password", "passwd")

# The `x-mcp-` headers that carry no credential: LiteLLM's proxy keeps them and drops the rest of the family (its
# `x-mcp-{server alias}-{header}` headers carry a credential for that MCP server; `x-mcp-auth` the MCP key).
_MCP_KEPT = frozenset(("x-mcp-servers", "x-mcp-access-groups"))


def is_credential(name: str) -> bool:
    """Whether a (lowercase) header name carries a credential, and is never given: one of the named credential
    headers (in `x-pass-` form too), any `x-mcp-` header but the two LiteLLM keeps, or one whose name holds a
    secret's word (`x-openai-api-key`, `x-aws-session-token`, a deployment's own key header), `_` read as `-` (a
    server may take `api_key` for `api-key`; the gateway's client keys are never given in any spelling)."""
    name = name.replace("_", "-")
    if name in _CREDENTIALS or name.removeprefix("x-pass-") in _CREDENTIALS:
        return True
    if name.startswith("x-mcp-") and name not in _MCP_KEPT:
        return True
    return any(word in name for word in _SECRET_WORDS)


def inbound_headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """The request's headers as guardrails are given them: lowercase names, without its credentials."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").lower()
        if is_credential(name):
            continue
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def request_url(scope: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The request's URL, as Starlette's `Request.url` gives it (its host from `Host`, else the server)."""
    scheme = scope.get("scheme") or "http"
    host = headers.get("host")
    if not host:
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else ""
    path = scope.get("path", "")  # under a `root_path` it holds the prefix already (ASGI), as Starlette reads it
    query = scope.get("query_string") or b""
    return f"{scheme}://{host}{path}" + (f"?{query.decode('latin-1')}" if query else "")


def with_server_fields(fields: dict[str, Any], body: Mapping[str, Any], scope: Mapping[str, Any]) -> None:
    """Write into the hooks' `fields` (the client's, as precall_kwargs's `client_fields` gives them) what LiteLLM's
    proxy sets from the request: `proxy_server_request` (its `body` the client's fields as given, the very objects
    the hooks' `kwargs` hold, not a second copy of the request, less any named as the server's keys are) and the
    server's keys of `metadata` (a dict; the client's `requester_metadata` a copy of its own, less the server's
    keys). A `metadata` that is not an object is left as it is: no guardrail reads headers there."""
    headers = inbound_headers(scope)
    url = request_url(scope, headers)
    fields["proxy_server_request"] = {
        "url": url,
        "method": scope.get("method", "POST"),
        "headers": headers,
        "body": {name: value for name, value in fields.items() if name in body and not _servers(name)},
    }
    metadata = fields.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return
    own = dict(metadata or {})
    client = scope.get("client")
    server = {
        "headers": dict(headers),
        "endpoint": url,
        "requester_ip_address": client[0] if client else "",
        "user_agent": headers.get("user-agent", ""),
    }
    if metadata is not None:
        server["requester_metadata"] = copied(own, {})
    fields["metadata"] = {**own, **server}


def model_call_details(body: dict[str, Any], provider: str, state: dict[str, Any]) -> dict[str, Any]:
    """`logging_obj.model_call_details` as LiteLLM fills it where its hooks read it.

    `litellm_params.metadata` holds `request.state.litellm_metadata` (a dict) and `request.state.user_api_key_auth`
    as `user_api_key_auth`, the caller identity LiteLLM's proxy puts there; `agentic_loop_params` names the
    request's model and provider.
    """
    metadata = dict(state.get("litellm_metadata") or {})
    if state.get("user_api_key_auth") is not None:
        metadata["user_api_key_auth"] = state["user_api_key_auth"]
    return {
        "litellm_params": {"metadata": metadata, "custom_llm_provider": provider},
        "agentic_loop_params": {"model": body.get("model"), "custom_llm_provider": provider},
    }


# The `metadata` keys written from the HTTP request that each rerun's guardrails get again.
_REQUEST_METADATA = ("headers", "endpoint", "requester_ip_address", "user_agent")


def remember(logging_obj: AgenticLoopLogging, fields: Mapping[str, Any]) -> None:
    """Keep what was written from the HTTP request: in the request's `logging_obj.model_call_details`, where
    LiteLLM's `Logging` holds it (`litellm_params.proxy_server_request`, and the `metadata` keys beside the
    caller's), and, for the guardrails that judge each rerun (`recalled`: a rerun is the same HTTP request), a copy
    of the middleware's own on the logging object. Each is a copy of what the hooks were given, never the same
    objects: a `during_call` hook judges a deep copy of the request but shares the logging object, and what it
    wrote into one of them would otherwise be the headers every later guardrail is given."""
    request = fields.get("proxy_server_request")
    if not isinstance(request, dict):
        return
    given = fields.get("metadata")
    kept = {
        "proxy_server_request": {name: value for name, value in request.items() if name != "body"},
        "metadata": {name: given[name] for name in _REQUEST_METADATA if name in given}
        if isinstance(given, dict)
        else {},
    }
    logging_obj.request_fields = copied(kept, {})
    params = logging_obj.model_call_details.get("litellm_params")
    if not isinstance(params, dict):
        return
    params["proxy_server_request"] = copied(kept["proxy_server_request"], {})
    metadata = params.get("metadata")
    if isinstance(metadata, dict):
        for name, value in copied(kept["metadata"], {}).items():
            metadata.setdefault(name, value)


def recalled(kwargs: dict[str, Any], logging_obj: AgenticLoopLogging) -> None:
    """Give a rerun's guardrails (whose `kwargs` are the added messages alone) what the first request's were given
    from the HTTP request, each rerun its own copy: `proxy_server_request` (without a `body`: the rerun's is its
    messages) and those `metadata` keys. Without them a policy keyed by a header would judge every rerun as of no
    tenant."""
    kept = logging_obj.request_fields
    if not isinstance(kept, dict):
        return
    fresh = copied(kept, {})
    kwargs["proxy_server_request"] = fresh["proxy_server_request"]
    if "metadata" not in kwargs:
        kwargs["metadata"] = fresh["metadata"]
