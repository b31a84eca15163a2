"""What the gateway's model apps share: the route names, the model interface, each route's error shape."""

from __future__ import annotations

from typing import Literal, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

Route = Literal["messages", "chat_completions", "responses"]


class Model(Protocol):
    """Answers one model request; the gateway's routes call it, behind the middleware."""

    async def __call__(self, request: Request, route: Route) -> Response: ...

    async def aclose(self) -> None: ...


def error_response(route: Route, status: int, message: str, code: str | None = None) -> JSONResponse:
    """An error in the route's own shape, so the SDKs raise their usual exceptions."""
    kind = "api_error" if status >= 500 else "invalid_request_error"
    if route == "messages":
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status)
