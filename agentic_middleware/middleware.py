"""The ASGI entry: which requests take part in the loop; everything else passes through untouched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import read_body, replay, scope_with_body_length
from .config import DEFAULT_MAX_AGENTIC_LOOPS, DEFAULT_ROUTES, Settings
from .hooks import BoundHook
from .loop import AgenticLoop, is_internal_field


class AgenticLoopMiddleware:
    """Runs server-side tool loops for non-streaming JSON requests on the model routes.

    `hooks` are asked about every buffered answer, in order. `routes` maps a
    request path to its wire format ("messages" or "chat_completions").
    """

    def __init__(
        self,
        app: ASGIApp,
        hooks: Sequence[object] = (),
        *,
        routes: Mapping[str, str] = DEFAULT_ROUTES,
        max_agentic_loops: int = DEFAULT_MAX_AGENTIC_LOOPS,
        custom_llm_provider: str | Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self.settings = Settings(
            routes=dict(routes), max_agentic_loops=max_agentic_loops, custom_llm_provider=custom_llm_provider
        )
        self.hooks = tuple(BoundHook(hook) for hook in hooks)
        self.routes = self.settings.surface_routes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        surface = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if surface is None:
            await self.app(scope, receive, send)
            return
        raw = await read_body(receive)
        if raw is None:
            return  # the client left before its request was complete: nobody to answer
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if type(body) is dict:
            internal = [name for name in body if is_internal_field(name)]
            if internal:
                for name in internal:
                    del body[name]
                raw = orjson.dumps(body)
                scope = scope_with_body_length(scope, len(raw))
            if self.hooks and not body.get("stream"):
                await AgenticLoop(self.app, self.hooks, self.settings, surface, scope, receive, send, body).run(raw)
                return
        await self.app(scope, replay(raw, receive), send)
