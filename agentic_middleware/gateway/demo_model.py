"""The gateway's default model: a scripted stand-in that uses the server tools as a real model would.

It calls `retrieve` for a compressed stub, `local_time` (the example MCP server's tool) for "What time is it in
<city>?", `web_search` for another question (one ending in "?"), and answers from the tool result once one is in
the history, citing the top search result. No keys, no network.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .. import sse
from ..sse import responses_events
from ..testing import chat_completion, function_call, message, response, tool_call, tool_use
from .wire import Route, error_response

_TOP_RESULT = re.compile(r"^\[1\] (?P<title>.+)\nURL: (?P<url>\S+)\n(?P<snippet>.+)$", re.MULTILINE)
_TIME_IN = re.compile(r"^what time is it in (?P<city>[^?]+)\?$", re.IGNORECASE)
_LOCAL_TIME = re.compile(r"^It is \d\d:\d\d in ")
_STUB_KEY = re.compile(r'retrieve\(key="(?P<key>[^"]+)"\)')
_CHAT_ERROR = "Error: "


class DemoModel:
    """Serves the three routes; `calls` counts the requests it answered, the loop's internal calls included."""

    def __init__(self) -> None:
        self.calls = 0

    async def aclose(self) -> None:
        return None

    async def __call__(self, request: Request, route: Route) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            body = None
        if route == "responses" and isinstance(body, dict) and isinstance(body.get("input"), str | list):
            body = {**body, "messages": _as_messages(body["input"])}
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            what = "an input string or list" if route == "responses" else "a messages list"
            return error_response(route, 400, f"the body must be a JSON object with {what}")
        self.calls += 1
        model = str(body.get("model") or "demo")
        stream = body.get("stream") is True
        step = decide(_read(body, route), declared=_declared(body))
        if stream and step[0] == "say":
            return _stream(route, model, step[1])
        if route == "responses":
            answer = response(step[1] if step[0] == "say" else function_call(step[1], step[2]), model=model)
            if stream:
                return StreamingResponse(iter(list(responses_events(answer))), media_type="text/event-stream")
            return JSONResponse(answer)
        if step[0] == "say":
            answer = message(step[1], model=model) if route == "messages" else chat_completion(step[1], model=model)
        elif route == "messages":
            answer = message(tool_use(step[1], step[2]), model=model)
        else:
            answer = chat_completion(tool_calls=[tool_call(step[1], step[2])], model=model)
        if stream:  # a tool call, streamed (the middleware streams every round live)
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            events = sse.messages_events(answer) if route == "messages" else sse.chat_chunks(answer, usage)
            return StreamingResponse(iter(list(events)), media_type="text/event-stream")
        return JSONResponse(answer)


class Turn:
    """What the demo model looks at: the user's last text, the history's texts, the tool result after it."""

    def __init__(self, question: str, texts: list[str], result: str | None, failed: bool) -> None:
        self.question = question
        self.texts = texts
        self.result = result
        self.failed = failed


def decide(turn: Turn, declared: set[str]) -> tuple[str, Any, Any]:
    """("say", text, None) or ("call", tool, input)."""
    if turn.result is not None:
        return "say", answer_from(turn.result, turn.failed), None
    stub = next((match for text in turn.texts for match in _STUB_KEY.finditer(text)), None)
    if stub and "retrieve" in declared:
        return "call", "retrieve", {"key": stub["key"]}
    time_in = _TIME_IN.match(turn.question.strip())
    if time_in and "local_time" in declared:
        return "call", "local_time", {"city": time_in["city"]}
    if "web_search" in declared and turn.question.rstrip().endswith("?"):
        return "call", "web_search", {"query": turn.question.strip()}
    if turn.question.rstrip().endswith("?"):
        return "say", "I have no web_search tool in this request, so I cannot look that up.", None
    return "say", f"You said: {turn.question[:200]!r}. Ask me a question ending in '?' and I will search for it.", None


def answer_from(result: str, failed: bool) -> str:
    if failed:
        return f"The tool failed, so I cannot answer: {result}"
    if _LOCAL_TIME.match(result):
        return result
    top = _TOP_RESULT.search(result)
    if top:
        sentence = top["snippet"].split(". ")[0].rstrip(".")
        return f'According to "{top["title"]}" ({top["url"]}): {sentence}.'
    if result.startswith("No results"):
        return "I searched but found nothing about that."
    return f"I read the full text ({len(result):,} characters). It begins: {result[:120]!r}"


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]
    return []


def _as_messages(items: str | list[Any]) -> list[Any]:
    """Responses input as chat messages, which `_read` understands: a tool's output becomes a `tool` message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return [
        {"role": "tool", "content": item.get("output")} if item.get("type") == "function_call_output" else item
        for item in items
        if isinstance(item, dict)
    ]


def _read(body: dict[str, Any], route: Route) -> Turn:
    messages = [m for m in body["messages"] if isinstance(m, dict)]
    texts = [text for m in messages for text in _texts(m.get("content"))]
    asked = [i for i, m in enumerate(messages) if m.get("role") == "user" and _texts(m.get("content"))]
    last = asked[-1] if asked else -1
    question = " ".join(_texts(messages[last].get("content"))) if asked else ""
    result: str | None = None
    failed = False
    for m in messages[last + 1 :]:
        content = m.get("content")
        if route != "messages" and m.get("role") == "tool":
            result = " ".join(_texts(content))
            failed = result.startswith(_CHAT_ERROR)
        elif route == "messages" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    result = " ".join(_texts(block.get("content")))
                    failed = block.get("is_error") is True
    return Turn(question, texts, result, failed)


def _declared(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return names


def _stream(route: Route, model: str, text: str) -> StreamingResponse:
    """The answer as server-sent events in the route's format, a few words per event."""
    words = re.findall(r"\S+\s*", text) or [""]
    pieces = ["".join(words[i : i + 4]) for i in range(0, len(words), 4)]
    if route == "responses":
        return StreamingResponse(responses_events(response(text, model=model)), media_type="text/event-stream")
    return StreamingResponse(
        _messages_events(model, pieces) if route == "messages" else _chat_events(model, pieces),
        media_type="text/event-stream",
    )


def _sse(data: Any, event: str | None = None) -> bytes:
    return (f"event: {event}\n" if event else "").encode() + b"data: " + orjson.dumps(data) + b"\n\n"


async def _messages_events(model: str, pieces: list[str]) -> AsyncIterator[bytes]:
    start = {
        **message(model=model),
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    yield _sse({"type": "message_start", "message": start}, "message_start")
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    yield _sse(block, "content_block_start")
    for piece in pieces:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        yield _sse(delta, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    end = {"stop_reason": "end_turn", "stop_sequence": None}
    yield _sse({"type": "message_delta", "delta": end, "usage": {"output_tokens": len(pieces)}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


async def _chat_events(model: str, pieces: list[str]) -> AsyncIterator[bytes]:
    chunk: dict[str, Any] = {
        "id": f"chatcmpl-demo-{time.monotonic_ns()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    for index, piece in enumerate(pieces):
        delta = {"role": "assistant", "content": piece} if index == 0 else {"content": piece}
        yield _sse({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield _sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield b"data: [DONE]\n\n"
