"""What the gateway's model apps share: the route names, the model interface, each route's error shape."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

Route = Literal["messages", "chat_completions", "responses"]
MODEL_ROUTES: dict[str, Route] = {
    "/v1/messages": "messages",
    "/v1/chat/completions": "chat_completions",
    "/v1/responses": "responses",
}


class Model(Protocol):
    """Answers one model request; the gateway's routes call it, behind the middleware."""

    async def __call__(self, request: Request, route: Route) -> Response: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Forwarder(Model, Protocol):
    """A model that also forwards every other path (`/v1/models`, `/v1/messages/count_tokens`, `HEAD /`, ...)."""

    async def forward(self, request: Request) -> Response: ...


def route_of(path: str) -> Route:
    """The API family whose error shape a path's errors take: Anthropic's under /v1/messages, OpenAI's elsewhere."""
    return "messages" if path == "/v1/messages" or path.startswith("/v1/messages/") else "chat_completions"


def error_response(route: Route, status: int, message: str, code: str | None = None) -> JSONResponse:
    """An error in the route's own shape, so the SDKs raise their usual exceptions."""
    kind = "api_error" if status >= 500 else "invalid_request_error"
    if route == "messages":
        if status == 401:
            kind = "authentication_error"
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status)
