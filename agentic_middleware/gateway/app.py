"""The gateway: a Starlette app serving the model routes, with the agentic middleware in front of them.

Starlette, not FastAPI: the model routes forward bytes, so FastAPI's request handling, validation and OpenAPI pages
would do nothing for them, yet importing FastAPI cost the gateway about 0.18 s of CPU at every start and its
layers some microseconds on each of the loop's internal calls (docs/performance.md). A FastAPI app takes the
middleware the same way, `app.add_middleware(AgenticLoopMiddleware, ...)` (README).

The gateway answers `/health` and `/metrics` itself; every other path goes to the model (a forwarding model sends it
up as it came, the demo model answers 404), once paths.py has given a route's other spellings its path and, with a
guardrail or tool policy, refused the requests with a body no hook would judge.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from starlette import routing
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..config import Settings, load_config
from ..middleware import AgenticLoopMiddleware
from .demo_model import DemoModel
from .metrics import CountStreams, GatewayMetrics, chained
from .paths import GatewayPaths
from .wire import MODEL_ROUTES, Forwarder, Model, Route, error_response, route_of

DEMO_CONFIG = Path(__file__).with_name("demo.yaml")
ROUTES = MODEL_ROUTES


class ModelRoute:
    """One model route as a plain ASGI app: `model(request, route)`'s response, sent.

    Starlette wraps a request/response function in a layer of its own exception handling on every call; the app's
    own exception middleware around the router already does that job, and the middleware's loop calls these routes
    once per round, so the route is this class instead of a function."""

    def __init__(self, model: Model, route: Route) -> None:
        self.model = model
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            request = ReadRequest(scope, receive, await whole_body(receive))
        except ClientDisconnect:
            return  # the client left before its body ended: no one to answer, nothing sent up
        try:
            response = await self.model(request, self.route)
        except HTTPException as error:  # as the app's exception middleware would answer it (see `ModelPaths`)
            response = await http_error(request, error)
        await response(scope, receive, send)


class ReadRequest(Request):
    """A request whose body its route has read already: `body()` and `stream()` give it.

    Starlette's `body()` reads through `stream()`, an async generator closed by `aclosing`, about 16k instructions
    of the gateway's CPU on each of the loop's rounds (callgrind: docs/performance.md); the route reads the same
    ASGI messages in a plain loop instead."""

    def __init__(self, scope: Scope, receive: Receive, body: bytes) -> None:
        super().__init__(scope, receive)
        self._read = body

    async def body(self) -> bytes:
        return self._read

    async def stream(self) -> AsyncGenerator[bytes, None]:
        if self._read:
            yield self._read
        yield b""


async def whole_body(receive: Receive) -> bytes:
    """The request body, whole, as Starlette's `Request.body()` reads it (`ClientDisconnect` if the client left)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


class ModelPaths:
    """A POST to a model route's own path goes to its route at once; every other request to the app behind (the
    exception middleware, then the router, which would have picked the same route).

    The loop calls a model route on every round; through Starlette's exception middleware and router each call made
    a `Request`, wrapped `send`, and matched the path against the routes' patterns (callgrind: docs/performance.md).
    A `ModelRoute` answers an `HTTPException` itself, as that middleware would. A scope with a `root_path` (an app
    mounted under a prefix) takes the router's way, which strips it."""

    def __init__(self, app: ASGIApp, routes: dict[str, ModelRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = self.routes.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.app(scope, receive, send)


NO_WEBSOCKETS = "the gateway serves no websockets: send the request over HTTP"


class Forwarding:
    """Every path the gateway does not answer itself, any method, to the model's `forward`.

    Except a websocket handshake, on any path: the gateway relays no websockets, and a turn over one (Codex's
    Responses websocket) would bypass the loop. It gets a 426 at once, which Codex takes as "use HTTP" and falls
    back on; forwarded, the upstream's 404 or 405 made it retry the websocket for some seconds, each try an error
    shown to its user. Under a server with websockets (a websocket scope) it is refused the same way."""

    def __init__(self, model: Forwarder) -> None:
        self.model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # a websocket, from a server that hands them on (hypercorn, uvicorn with ws)
            await refuse_websocket(scope, send)
            return
        request = Request(scope, receive)
        if request.headers.get("upgrade", "").lower() == "websocket":  # a server without websockets (the CLI's)
            response: Response = error_response(route_of(request.url.path), 426, NO_WEBSOCKETS)
        else:
            response = await self.model.forward(request)
        await response(scope, receive, send)


async def refuse_websocket(scope: Scope, send: Send) -> None:
    """A websocket handshake answered 426 in the route's error shape where the server can send an HTTP answer to
    one (the ASGI `websocket.http.response` extension), else closed before it is accepted (the server's 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": NO_WEBSOCKETS})
        return
    answer = error_response(route_of(scope["path"]), 426, NO_WEBSOCKETS)
    await send({"type": "websocket.http.response.start", "status": 426, "headers": answer.raw_headers})
    await send({"type": "websocket.http.response.body", "body": answer.body})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def http_error(request: Request, error: Exception) -> Response:
    """A 404 or 405 of the gateway's own as a JSON error the SDKs parse: Anthropic's shape under /v1/messages,
    OpenAI's elsewhere."""
    assert isinstance(error, HTTPException)
    response = error_response(route_of(request.url.path), error.status_code, error.detail)
    response.headers.update(error.headers or {})  # a 405's `Allow`
    return response


def model_app(model: Model, metrics: GatewayMetrics | None = None) -> Starlette:
    """The model routes alone, without the middleware: what an upstream model server looks like, plus `/health`,
    `/metrics` (with `metrics`) and every other path forwarded."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await model.aclose()

    own = [routing.Route("/health", health, methods=["GET", "HEAD"])]
    if metrics is not None:
        own.append(routing.Route("/metrics", metrics.endpoint, methods=["GET", "HEAD"]))
    model_routes = {path: ModelRoute(model, route) for path, route in ROUTES.items()}
    models = [routing.Route(path, endpoint, methods=["POST"]) for path, endpoint in model_routes.items()]
    # A model that forwards gets every other path (a GET of /v1/chat/completions too: the upstream answers it);
    # the demo model does not, and the router answers 404 or 405 itself.
    rest = [routing.Mount("/", Forwarding(model))] if isinstance(model, Forwarder) else []
    app = Starlette(
        routes=[*models, *own, *rest],  # the model routes first: the loop's every round is routed to one
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
        middleware=[Middleware(ModelPaths, routes=model_routes)],  # innermost of the app's own middleware
    )
    app.state.model = model
    return app


def create_app(config: str | os.PathLike[str] | Settings = DEMO_CONFIG, model: Model | None = None) -> Starlette:
    """The gateway; the config is read and checked now, so a mistake in it stops the start, not a request.

    Before the middleware, the other spellings of a model route are given its path, and with a guardrail or tool
    policy mounted a POST the middleware would not judge is refused unless `forward_unjudged` lists it (paths.py).

    `/metrics` counts every round through the middleware's `on_round` callback; a callback the config names still
    runs, after it."""
    settings = config if isinstance(config, Settings) else load_config(config)
    metrics = GatewayMetrics()
    settings = replace(settings, on_round=chained(metrics.on_round, settings.on_round))
    app = model_app(model or DemoModel(), metrics)
    app.add_middleware(AgenticLoopMiddleware, config=settings)
    app.add_middleware(GatewayPaths, settings=settings)  # before the middleware: it sees each route's own path
    app.add_middleware(CountStreams, metrics=metrics)  # outermost: the streams as the clients get them
    app.state.metrics = metrics
    return app
