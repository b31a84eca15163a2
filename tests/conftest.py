"""Clients for driving a middleware-wrapped app in-process: the official SDKs and plain httpx."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import httpx2
import openai
from starlette.types import ASGIApp


def anthropic_client(app: ASGIApp, base_url: str = "http://gateway", **options: object) -> anthropic.AsyncAnthropic:
    options.setdefault("api_key", "test-key")
    return anthropic.AsyncAnthropic(
        base_url=base_url,
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
        **options,  # type: ignore[arg-type]
    )


def openai_client(app: ASGIApp, **options: object) -> openai.AsyncOpenAI:
    options.setdefault("api_key", "test-key")
    return openai.AsyncOpenAI(
        base_url="http://gateway/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
        **options,  # type: ignore[arg-type]
    )


def http_scope(path: str, body: bytes) -> dict[str, Any]:
    """The scope a server gives a JSON POST, for tests that call the ASGI app with their own receive and send."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "server": ("test", 80),
        "client": ("test", 1),
    }


def http_client(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
