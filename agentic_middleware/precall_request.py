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
`x-pass-` forms), `proxy-authorization` and `cookie`. LiteLLM's proxy masks their values; here they are left out,
since no guardrail should judge by a secret, and the guardrail service a guardrail forwards headers to is another
party. A header sent more than once is given once, its values joined by ", " (HTTP's own reading), so that a
second copy cannot stand in for the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .precall_kwargs import copied

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


def inbound_headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """The request's headers as guardrails are given them: lowercase names, without its credentials."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").lower()
        if name in _CREDENTIALS or name.removeprefix("x-pass-") in _CREDENTIALS:
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


# The `metadata` keys written from the HTTP request that each rerun's guardrails get again.
_REQUEST_METADATA = ("headers", "endpoint", "requester_ip_address", "user_agent")


def remember(details: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Keep what was written from the HTTP request in the request's `logging_obj.model_call_details`, where
    LiteLLM's `Logging` holds it (`litellm_params.proxy_server_request`, and the `metadata` keys beside the
    caller's), for the guardrails that judge each rerun (`recalled`): a rerun is the same HTTP request."""
    params = details.get("litellm_params")
    request = fields.get("proxy_server_request")
    if not isinstance(params, dict) or not isinstance(request, dict):
        return
    params["proxy_server_request"] = {name: value for name, value in request.items() if name != "body"}
    metadata, given = params.get("metadata"), fields.get("metadata")
    if isinstance(metadata, dict) and isinstance(given, dict):
        for name in _REQUEST_METADATA:
            if name in given:
                metadata.setdefault(name, given[name])


def recalled(kwargs: dict[str, Any], details: Mapping[str, Any]) -> None:
    """Give a rerun's guardrails (whose `kwargs` are the added messages alone) what the first request's were given
    from the HTTP request: `proxy_server_request` (without a `body`: the rerun's is its messages) and those
    `metadata` keys. Without them a policy keyed by a header would judge every rerun as of no tenant."""
    params = details.get("litellm_params")
    request = params.get("proxy_server_request") if isinstance(params, dict) else None
    if not isinstance(request, dict):
        return
    kwargs["proxy_server_request"] = dict(request)
    metadata = params.get("metadata") if isinstance(params, dict) else None
    if "metadata" not in kwargs and isinstance(metadata, dict):
        kwargs["metadata"] = {name: metadata[name] for name in _REQUEST_METADATA if name in metadata}
