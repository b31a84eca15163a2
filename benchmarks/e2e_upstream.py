"""The scripted upstream of cases 5 and 6: a zero-latency model on `POST /v1/messages`, served by uvicorn.

It keeps no state, so any number of clients can share it: the first user message says how many tool calls to make
(`"pages=3"`), and the answer depends only on how many `tool_result` blocks the history already holds: a `lookup`
call for page n while n is below that number, then a final text. Every answer is serialized once, at import.

    python -m uvicorn benchmarks.e2e_upstream:app --host 127.0.0.1 --port 8001
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentic_middleware.testing import message, tool_use

from .e2e_hooks import TOOL

MAX_PAGES = 8
CALLS = [orjson.dumps(message("Let me look.", tool_use(TOOL, {"page": n}, id=f"toolu_p{n}"))) for n in range(MAX_PAGES)]
FINAL = orjson.dumps(message("Here is what I found."))


def answer(body: Any) -> bytes:
    messages = body["messages"]
    first = messages[0]["content"]
    pages = int(first.partition("pages=")[2] or 0) if isinstance(first, str) else 0
    done = sum(
        1
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    )
    return CALLS[done] if done < min(pages, MAX_PAGES) else FINAL


async def messages(request: Request) -> Response:
    return Response(answer(orjson.loads(await request.body())), media_type="application/json")


app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
