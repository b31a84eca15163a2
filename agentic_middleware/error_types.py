"""The HTTP status an error of the model app stands for, read from the error's type or code.

An error that arrives as an event of a stream (Anthropic's `error` event, a Chat chunk with an `error`, a Responses
`error` or `response.failed`) came after a 200, so its status is not on the wire: it is the one the provider answers
the same error with when it does not stream. That status decides whether a rerun is retried (`retries.py`: only
429 and the 5xx) and what the client is told, so a request the provider refused for good (a prompt too long, a bad
key) is not sent three more times, nor reported as the provider's own failure.
"""

from __future__ import annotations

from typing import Any

import orjson

ANTHROPIC_TYPES = {
    # https://docs.claude.com/en/api/errors (`timeout_error` and `billing_error`: the SDKs' error types too)
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

OPENAI_CODES = {
    # OpenAI's error `type`s and `code`s (the API's error codes page; the Responses `ResponseError.code` values).
    "invalid_request_error": 400,
    "invalid_prompt": 400,
    "bio_policy": 400,
    "misalignment_policy_violation": 400,
    "data_residency_mismatch": 400,
    "context_length_exceeded": 400,
    "invalid_image": 400,
    "invalid_image_format": 400,
    "invalid_base64_image": 400,
    "invalid_image_url": 400,
    "image_too_large": 400,
    "image_too_small": 400,
    "image_parse_error": 400,
    "image_content_policy_violation": 400,
    "invalid_image_mode": 400,
    "image_file_too_large": 400,
    "unsupported_image_media_type": 400,
    "empty_image_file": 400,
    "failed_to_download_image": 400,
    "image_file_not_found": 400,
    "invalid_api_key": 401,
    "insufficient_quota": 429,  # a 429 as the API answers it: the SDKs retry it as they retry every 429
    "model_not_found": 404,
    "rate_limit_exceeded": 429,
    "requests": 429,  # the `type` of a rate limit on requests
    "tokens": 429,  # ... on tokens
    "server_error": 500,
    "vector_store_timeout": 504,
}

_STATUSES = {**OPENAI_CODES, **ANTHROPIC_TYPES}  # no name is in both with different statuses

UNKNOWN_ERROR_STATUS = 502
"""An error event of a type neither provider documents: the app's stream failed, for a reason that cannot be told."""


def error_status(error: Any) -> int:
    """The status of an error object (`{"type", "code", "message"}`) or of a JSON error body holding one (either
    route's shape): its `code`, else its `type`, as the provider documents it; UNKNOWN_ERROR_STATUS when neither
    is known."""
    if isinstance(error, bytes):
        try:
            error = orjson.loads(error)
        except orjson.JSONDecodeError:
            return UNKNOWN_ERROR_STATUS
    if isinstance(error, dict) and isinstance(error.get("error"), dict):
        error = error["error"]
    if not isinstance(error, dict):
        return UNKNOWN_ERROR_STATUS
    for name in (error.get("code"), error.get("type")):
        if isinstance(name, str) and name in _STATUSES:
            return _STATUSES[name]
    return UNKNOWN_ERROR_STATUS
