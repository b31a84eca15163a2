"""The gateway: a FastAPI app serving the model routes, with the agentic middleware in front of them."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from agentic_middleware import AgenticLoopMiddleware, Settings, load_config

from .demo_model import DemoModel
from .upstream import Upstream
from .wire import Model, Route

CONFIG = Path(__file__).with_name("config.yaml")
ROUTES: dict[str, Route] = {
    "/v1/messages": "messages",
    "/v1/chat/completions": "chat_completions",
    "/v1/responses": "responses",
}
UPSTREAM_VARIABLE = "AGENTIC_UPSTREAM"
CONFIG_VARIABLE = "AGENTIC_GATEWAY_CONFIG"


def model_app(model: Model) -> FastAPI:
    """The model routes alone, without the middleware: what an upstream model server looks like."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await model.aclose()

    app = FastAPI(title="agentic gateway", lifespan=lifespan)
    app.state.model = model

    def endpoint(route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def forward(request: Request) -> Response:
            return await model(request, route)

        return forward

    # Plain Starlette routes, not FastAPI's: they take a Request and return a Response, so FastAPI's request handling
    # (dependencies, validation) would do nothing here but cost about 0.2 ms a call, and the middleware's loop calls
    # these routes once per round (docs/performance.md).
    for path, route in ROUTES.items():
        app.add_route(path, endpoint(route), methods=["POST"])

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def create_app(config: str | os.PathLike[str] | Settings = CONFIG, model: Model | None = None) -> FastAPI:
    """The gateway; the config is read and checked now, so a mistake in it stops the start, not a request."""
    settings = config if isinstance(config, Settings) else load_config(config)
    app = model_app(model or DemoModel())
    app.add_middleware(AgenticLoopMiddleware, config=settings)
    return app


def model_from_env() -> Model:
    """`Upstream(AGENTIC_UPSTREAM)` when the variable is set, else the scripted demo model."""
    upstream = os.environ.get(UPSTREAM_VARIABLE)
    return Upstream(upstream) if upstream else DemoModel()


def app_from_env() -> FastAPI:
    """The app factory that each uvicorn worker calls: the config named by AGENTIC_GATEWAY_CONFIG (default: the
    example's), in front of the model `model_from_env` picks. Nothing is shared between workers."""
    return create_app(os.environ.get(CONFIG_VARIABLE) or CONFIG, model_from_env())
