"""What `python -m benchmarks.callgrind` runs under valgrind: the measured requests, each bracketed by callgrind's
client requests (`callgrind.c`, loaded from `$BENCH_CALLGRIND_HELPER`; without it the bracket does nothing, so the
same code runs, and checks its answers, without valgrind).

- In process, per delta: `python -m benchmarks.callgrind_target LANE SMALL LARGE` runs case 9's streams (`LANES`;
  `tool-input`: a client tool's call, its input in deltas) through the middleware and bare, three times each at both
  sizes as warm-up, every answer checked, then one request
  of each counted alone: `middleware-SMALL`, `bare-SMALL`, `middleware-LARGE`, `bare-LARGE`. The fixed cost of a
  request cancels in the difference of the two sizes.
- Under uvicorn, per stream or request: `streams_bare`, `streams_wrapped`, `streams_floor` (case 12's scripted
  Messages app, bare, behind the middleware with its `ServerTools` hook or behind `ReadingFloor`, the probe left out)
  and `gateway` (a factory: the gateway's app as `agentic-gateway` builds it from the environment). `Bracket`
  answers `/callgrind/...` around them, so the harness, not the load, says when counting starts and stops.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_middleware import AgenticLoopMiddleware, ServerTools, sse
from agentic_middleware.testing import function_call, message, response

from .e2e_hooks import Lookup
from .live_stream import ROUTES, Client, Route, StreamingAnswers
from .streams_app import Probe, ReadingFloor, lookup, slow_model

# Importing `streams_app` made its probes, which time every garbage collection from `gc.callbacks`: not ours to count.
gc.callbacks[:] = [call for call in gc.callbacks if not isinstance(getattr(call, "__self__", None), Probe)]


class Helper:
    """The compiled bracket, or nothing outside the harness. A collection before each start, so that one due from
    earlier work is not counted in the next measurement."""

    def __init__(self, path: str | None) -> None:
        self.lib = ctypes.CDLL(path) if path else None
        if self.lib is not None:
            self.lib.bracket_stop.argtypes = [ctypes.c_char_p]

    def start(self) -> None:
        gc.collect()
        if self.lib is not None:
            self.lib.bracket_start()

    def stop(self, name: str) -> None:
        if self.lib is not None:
            self.lib.bracket_stop(name.encode())


HELPER = Helper(os.environ.get("BENCH_CALLGRIND_HELPER"))


def responses_tool_round() -> list[bytes]:
    """A Responses round that calls the `lookup` server tool: the middleware runs it, and the next round is later."""
    call = function_call("lookup", {"page": 1}, call_id="call_bench")
    return list(sse.responses_events({**response(call), "id": "resp_tool0001"}))


INPUT_MARK = b'"partial_json":"'  # an `input_json_delta`: the `tool-input` lane's client counts them


def tool_input(deltas: int) -> tuple[list[bytes]]:
    """A final round whose one block is a client tool's call (`lookup` is the only tool the hook claims) with its
    input in `deltas` `input_json_delta`s, each a piece of a string as a coding agent streams a file's text: JSON
    spelled in a JSON string, its quotes and line ends escaped."""
    body = message("", usage={"input_tokens": 10, "output_tokens": deltas})
    body["content"] = [{"type": "tool_use", "id": "toolu_bench", "name": "write_file", "input": {}}]
    pieces = ['{"path": "src/app.py", "content": "', *(f'tok{n} = \\"x\\"\\n' for n in range(deltas - 2)), '"}']
    events = [sse.messages_start(body), *list(sse.messages_block(0, body["content"][0]))[:1]]
    events += [
        sse.named_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": p}},
        )
        for p in pieces
    ]
    events.append(sse.named_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return ([*events, *sse.messages_end({**body, "stop_reason": "tool_use"})],)


@dataclass(frozen=True)
class Lane:
    """One per-delta figure: the route's client request, the app's rounds for N deltas, and the hooks."""

    route: Route
    rounds: Callable[[int], tuple[list[bytes], ...]]
    hooks: Callable[[], list[Any]]


def only(route: Route) -> Lane:
    """The route's final answer as the only round, with case 9's hook (it acts on no text): the pass-through."""
    return Lane(route, lambda deltas: (route.events(deltas),), lambda: [Lookup()])


LANES = {
    "messages": only(ROUTES[0]),
    "responses": only(ROUTES[1]),
    "responses-later": Lane(
        ROUTES[1], lambda deltas: (responses_tool_round(), ROUTES[1].events(deltas)), lambda: [ServerTools([lookup])]
    ),
    "chat": only(ROUTES[2]),
    "chat-padded": only(ROUTES[3]),
    "tool-input": Lane(replace(ROUTES[0], mark=INPUT_MARK), tool_input, lambda: [Lookup()]),
}


class Counting(Client):
    """The case's client, also counting the text deltas that reach it (`mark` in a body): the warm-up's check."""

    def __init__(self, route: Route) -> None:
        super().__init__(route.body, route.mark, route.path)
        self.deltas = 0

    async def send(self, message: Message) -> None:
        self.deltas += message.get("body", b"").count(self.mark)
        await super().send(message)


async def once(app: Any, model: StreamingAnswers, route: Route, check: int | None = None) -> None:
    """One streaming request; with `check`, the number of text deltas the client must get (and the app's rounds)."""
    model.rewind()
    client = Client(route.body, route.mark, route.path) if check is None else Counting(route)
    await client.run(app)  # raises unless 200 and a text delta arrived
    if isinstance(client, Counting) and client.deltas != check:
        raise RuntimeError(f"{route.path}: {client.deltas} text deltas reached the client, not {check}")
    if model.calls != len(model.rounds):
        raise RuntimeError(f"{route.path}: the app was called {model.calls} times, not {len(model.rounds)}")


async def deltas(lane: Lane, sizes: tuple[int, ...]) -> None:
    """The lane's measured requests at each size (`LANES`): warm-up and checks, then each counted alone."""
    for size in sizes:
        rounds = lane.rounds(size)
        model = StreamingAnswers(*rounds)
        app = AgenticLoopMiddleware(model, hooks=lane.hooks(), streaming=True)
        bare = StreamingAnswers(rounds[-1])
        for _ in range(3):
            await once(app, model, lane.route, size)
            await once(bare, bare, lane.route, size)
        HELPER.start()
        await once(app, model, lane.route)
        HELPER.stop(f"middleware-{size}")
        HELPER.start()
        await once(bare, bare, lane.route)
        HELPER.stop(f"bare-{size}")


class Bracket:
    """Around the served app: `POST /callgrind/start` starts counting, `POST /callgrind/stop?NAME` stops and dumps
    under NAME, `GET /callgrind/ready` says the worker serves; everything else is the app's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/callgrind/"):
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/callgrind/start":
            HELPER.start()
        elif scope["path"] == "/callgrind/stop":
            HELPER.stop(unquote(scope["query_string"].decode()))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


streams_bare = Bracket(slow_model)
streams_wrapped = Bracket(AgenticLoopMiddleware(slow_model, hooks=[ServerTools([lookup])]))
streams_floor = Bracket(ReadingFloor(slow_model))


def gateway() -> Bracket:
    """The gateway's app as each `agentic-gateway` worker makes it (`AGENTIC_UPSTREAM`, `AGENTIC_CONFIG`...)."""
    from agentic_middleware.gateway.environment import app_from_env

    return Bracket(app_from_env())


if __name__ == "__main__":
    lane, small, large = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(deltas(LANES[lane], (small, large)))
