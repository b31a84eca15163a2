"""The gateway: a Starlette app serving the model routes, with the agentic middleware in front of them.

Starlette, not FastAPI: the model routes forward bytes, so FastAPI's request handling, validation and OpenAPI pages
would do nothing for them, yet importing FastAPI cost the gateway about 0.18 s of CPU at every start and its
layers some microseconds on each of the loop's internal calls (docs/performance.md). A FastAPI app takes the
middleware the same way, `app.add_middleware(AgenticLoopMiddleware, ...)` (README).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette import routing
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from agentic_middleware import AgenticLoopMiddleware, Settings, load_config

from .demo_model import DemoModel
from .upstream import Upstream
from .wire import Model, Route, error_response

CONFIG = Path(__file__).with_name("config.yaml")
ROUTES: dict[str, Route] = {
    "/v1/messages": "messages",
    "/v1/chat/completions": "chat_completions",
    "/v1/responses": "responses",
}
UPSTREAM_VARIABLE = "AGENTIC_UPSTREAM"
CONFIG_VARIABLE = "AGENTIC_GATEWAY_CONFIG"


class ModelRoute:
    """One model route as a plain ASGI app: `model(request, route)`'s response, sent.

    Starlette wraps a request/response function in a layer of its own exception handling on every call; the app's
    own exception middleware around the router already does that job, and the middleware's loop calls these routes
    once per round, so the route is this class instead of a function."""

    def __init__(self, model: Model, route: Route) -> None:
        self.model = model
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.model(Request(scope, receive), self.route)
        await response(scope, receive, send)


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def http_error(request: Request, error: Exception) -> Response:
    """A 404 or 405 of the gateway's own as a JSON error the SDKs parse: Anthropic's shape under /v1/messages,
    OpenAI's elsewhere."""
    assert isinstance(error, HTTPException)
    route: Route = "messages" if request.url.path.startswith("/v1/messages") else "chat_completions"
    response = error_response(route, error.status_code, error.detail)
    response.headers.update(error.headers or {})  # a 405's `Allow`
    return response


def model_app(model: Model) -> Starlette:
    """The model routes alone, without the middleware: what an upstream model server looks like."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await model.aclose()

    routes = [routing.Route(path, ModelRoute(model, route), methods=["POST"]) for path, route in ROUTES.items()]
    app = Starlette(
        routes=[*routes, routing.Route("/health", health, methods=["GET"])],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.model = model
    return app


def create_app(config: str | os.PathLike[str] | Settings = CONFIG, model: Model | None = None) -> Starlette:
    """The gateway; the config is read and checked now, so a mistake in it stops the start, not a request."""
    settings = config if isinstance(config, Settings) else load_config(config)
    app = model_app(model or DemoModel())
    app.add_middleware(AgenticLoopMiddleware, config=settings)
    return app


def model_from_env(error_details: bool = True) -> Model:
    """`Upstream(AGENTIC_UPSTREAM)` when the variable is set, else the scripted demo model."""
    upstream = os.environ.get(UPSTREAM_VARIABLE)
    return Upstream(upstream, error_details=error_details) if upstream else DemoModel()


def app_from_env() -> Starlette:
    """The app factory that each uvicorn worker calls: the config named by AGENTIC_GATEWAY_CONFIG (default: the
    example's), in front of the model `model_from_env` picks. Nothing is shared between workers."""
    settings = load_config(os.environ.get(CONFIG_VARIABLE) or CONFIG)
    return create_app(settings, model_from_env(settings.error_details))
