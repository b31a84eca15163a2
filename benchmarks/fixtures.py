"""The apps and bodies the cases run: a zero-latency model, a hand-written middleware to compare with, histories.

The hook is `e2e_hooks.Lookup`, the one every case uses: its gate says no to an answer without `lookup` calls.
"""

from __future__ import annotations

import itertools
from time import perf_counter_ns
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_middleware.testing import message, tool_use

from .e2e_hooks import TOOL, TOOLS, Lookup


class ScriptedAnswers:
    """A zero-latency model app: it drains the request, sends pre-serialized answers in order, and keeps nothing.

    Unlike `agentic_middleware.testing.ScriptedModel` it neither parses nor records the request, so that
    neither its time nor its memory is mistaken for the middleware's. `own_ns` is the time spent in its
    own code, `receive` and `send` left out (those run the caller's code); `rewind()` starts the script again.
    """

    def __init__(self, *answers: bytes) -> None:
        self.answers = answers
        self.calls = 0
        self.own_ns = 0

    def rewind(self) -> None:
        self.calls = 0
        self.own_ns = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = perf_counter_ns()
        more = True
        while more:
            self.own_ns += perf_counter_ns() - start
            message = await receive()
            start = perf_counter_ns()
            more = message.get("more_body", False)
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        start_message: Message = {"type": "http.response.start", "status": 200, "headers": headers}
        self.own_ns += perf_counter_ns() - start
        await send(start_message)
        start = perf_counter_ns()
        body_message: Message = {"type": "http.response.body", "body": answer}
        self.own_ns += perf_counter_ns() - start
        await send(body_message)


def health_app() -> Starlette:
    """A Starlette model app's other route, the kind of request the middleware must only let through."""

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/health", health)])


class NoOp:
    """The least any class-based ASGI middleware costs: one more instance call and one more coroutine."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class HandWritten(BaseHTTPMiddleware):
    """What one writes without this package: parse the request, read and parse the answer, ask the gate, rebuild."""

    def __init__(self, app: ASGIApp, hook: Lookup) -> None:
        super().__init__(app)
        self.hook = hook

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        body = orjson.loads(await request.body())
        response = await call_next(request)
        raw = b"".join([chunk async for chunk in getattr(response, "body_iterator")])  # noqa: B009
        await self.hook.async_should_run_agentic_loop(
            response=orjson.loads(raw),
            model=body.get("model"),
            messages=body.get("messages"),
            tools=body.get("tools"),
            stream=False,
            custom_llm_provider="anthropic",
            kwargs={},
        )
        return Response(raw, status_code=response.status_code, headers=dict(response.headers))


_WORDS = [
    "the",
    "model",
    "asked",
    "for",
    "a",
    "search",
    "and",
    "the",
    "tool",
    "answered",
    "with",
    "pages",
    "of",
    "plain",
    "text",
    "about",
    "it",
]


def text(length: int, seed: int) -> str:
    """Plain prose of about `length` characters, different for each seed so no two blocks are the same string."""
    words = itertools.islice(itertools.cycle(_WORDS), seed % len(_WORDS), None)
    out: list[str] = [f"#{seed}"]
    size = len(out[0])
    for word in words:
        if size >= length:
            break
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def history(size: int) -> list[dict[str, Any]]:
    """An agent's history of about `size` bytes of JSON: text turns, tool calls and tool results of a few KB."""
    messages: list[dict[str, Any]] = []
    used = 0
    for n in itertools.count():
        if used >= size:
            break
        call_id = f"toolu_h{n:06d}"
        turn: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": text(600, n)}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text(200, n + 1)},
                    {"type": "tool_use", "id": call_id, "name": "search", "input": {"query": text(40, n + 2)}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text(1500, n)}]},
            {"role": "assistant", "content": [{"type": "text", "text": text(400, n + 3)}]},
        ]
        messages.extend(turn)
        used += len(orjson.dumps(turn))
    messages.append({"role": "user", "content": "Go on."})
    return messages


def request_body(history_size: int) -> dict[str, Any]:
    """A Messages request with a history of about `history_size` bytes and the `lookup` tool."""
    return {"model": "scripted-model", "max_tokens": 1024, "tools": TOOLS, "messages": history(history_size)}


def loop_answers(reruns: int) -> list[dict[str, Any]]:
    """`reruns` answers that each call `lookup` with a new input (a repeat would end the loop), then a final text."""
    calls = [message("Let me look.", tool_use(TOOL, {"page": n}, id=f"toolu_loop{n}")) for n in range(reruns)]
    return [*calls, message("Here is what I found.")]


def one_kb_answer() -> dict[str, Any]:
    """A final text answer of about 1 KB, the common case: nothing for a server tool to do."""
    answer = message(text(700, 7))
    while len(orjson.dumps(answer)) < 1024:
        answer["content"][0]["text"] += " more"
    return answer
