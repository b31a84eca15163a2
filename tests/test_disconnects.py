"""A client that leaves while its looped stream is being written gets nothing more: not one `send()` after it left.

In-process with a recording `send`, and under uvicorn and hypercorn (which logs every write to a closed
connection), with socket buffers made small so that the answer is still being written when the client hangs up.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
import pytest
from conftest import http_scope
from servers import SERVERS, serving
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from support import Route, ToolHook, client_receive, read_body

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_use

ROUTES = [Route("messages"), Route("chat")]


@server_tool
async def lookup() -> str:
    return "found"


def long_answer(route: Route) -> dict[str, Any]:
    """A final answer of many events: many text blocks, or one long content string."""
    if route.name == "messages":
        return message(*(f"paragraph {n} " + "x" * 4000 for n in range(200)))
    return chat_completion("y" * 800_000)


def looped_model(route: Route) -> ScriptedModel:
    return ScriptedModel(route.calls(("lookup", {})), long_answer(route))


class Recorder:
    """Wraps an ASGI app: records what it sends, and where in that the app was told the client left."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.sent: list[Message] = []
        self.disconnect_at: int | None = None
        self.finished = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and self.disconnect_at is None:
                self.disconnect_at = len(self.sent)
            return message

        async def recorded_send(message: Message) -> None:
            self.sent.append(message)
            await send(message)

        try:
            await self.app(scope, watched_receive, recorded_send)
        finally:
            self.finished.set()

    @property
    def after_disconnect(self) -> list[Message]:
        assert self.disconnect_at is not None, "the app was never told the client left"
        return self.sent[self.disconnect_at :]


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_client_leaving_mid_answer_gets_no_further_send_in_process(route: Route) -> None:
    left = asyncio.Event()
    raw = orjson.dumps(route.request(stream=True))
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if len(sent) == 10:  # the response start and nine events of the answer: the client hangs up
            left.set()

    app = AgenticLoopMiddleware(looped_model(route), hooks=[ServerTools([lookup])])
    await asyncio.wait_for(app(http_scope(route.path, raw), receive, send), 10)

    assert len(sent) == 10
    assert sent[-1].get("more_body") is True  # cut off mid-answer: the stream's end was not written either


async def hang_up_mid_answer(port: int, route: Route) -> bytes:
    """Posts a streaming request over a socket with a tiny receive buffer, reads into the answer, hangs up."""
    body = orjson.dumps(route.request(stream=True))
    head = (
        f"POST {route.path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, head + body)
    seen = b""
    marker = b"content_block_delta" if route.name == "messages" else b'"content":"y'
    while marker not in seen:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)
        assert chunk, "the server closed the stream before the answer"
        seen += chunk
    sock.close()  # with unread data waiting: the kernel resets the connection
    return seen


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_client_leaving_mid_answer_gets_no_further_send_under_a_server(route: Route, server: str) -> None:
    recorder = Recorder(AgenticLoopMiddleware(looped_model(route), hooks=[ServerTools([lookup])]))
    async with serving(server, recorder, send_buffer=4096) as served:
        seen = await hang_up_mid_answer(served.port, route)
        await asyncio.wait_for(recorder.finished.wait(), 20)

    assert b" 200 " in seen.split(b"\r\n", 1)[0]
    assert recorder.after_disconnect == []
    assert recorder.sent[-1].get("more_body") is True  # the answer was cut short, and its end not written


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_send_that_raises_is_the_last_one_and_the_loop_still_cleans_up(route: Route) -> None:
    """Some servers raise on a write to a closed connection (the ASGI spec asks for an `OSError`)."""
    raw = orjson.dumps(route.request(stream=True))
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    calls: list[Message] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the server never says the client left: the raise is the only sign
        return {}

    async def send(message: Message) -> None:
        calls.append(message)
        if len(calls) >= 5:
            raise ConnectionResetError("the client is gone")

    hook = ToolHook("lookup")
    app = AgenticLoopMiddleware(looped_model(route), hooks=[hook], streaming=True)
    await asyncio.wait_for(app(http_scope(route.path, raw), receive, send), 10)

    assert len(calls) == 5  # the one that raised was the last
    assert len(hook.cleanups) == 1


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_an_app_whose_wait_for_the_disconnect_timed_out_still_hears_it(route: Route) -> None:
    """After its body, a rerun's app reads `receive` from the middleware (the client's is the watcher's): a read the app
    gave up on (a timeout) must not spoil the next one, which hears the client leave."""
    left = asyncio.Event()
    raw = orjson.dumps(route.request())
    receive = client_receive(raw, left)
    listening = asyncio.Event()
    heard: list[asyncio.Task[Message]] = []

    async def send(message: Message) -> None:
        raise AssertionError(f"nothing is written to a client that left: {message}")

    async def model(scope: Scope, receive: Receive, send: Send) -> None:
        request = await read_body(receive)
        if len(orjson.loads(request)["messages"]) == 1:
            answer = orjson.dumps(route.calls(("lookup", {})))
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": answer})
            return
        for _ in range(2):  # reads that time out, as an app polling for the disconnect does
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(receive(), 0.01)
        heard.append(asyncio.ensure_future(receive()))  # a task of its own: the loop's cancellation leaves it
        listening.set()
        await asyncio.sleep(30)

    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    task = asyncio.ensure_future(app(http_scope(route.path, raw), receive, send))
    await asyncio.wait_for(listening.wait(), 5)
    left.set()
    await asyncio.wait_for(task, 5)

    assert await asyncio.wait_for(heard[0], 5) == {"type": "http.disconnect"}


@pytest.mark.parametrize("rounds", [1, 2], ids=["first round", "after a tool round"])
async def test_a_live_text_delta_whose_write_raises_is_the_last_send_and_stops_the_app(rounds: int) -> None:
    """A live stream's text deltas are written by the relay's lane (one whole delta at a time, as the API streams
    them): a write that raises there ends the response as anywhere else, and the app's stream is stopped."""
    answer = list(sse.messages_events(message("word " * 400), chunk_size=5))
    call = list(sse.messages_events(message("Let me look.", tool_use("lookup", {}))))
    made: list[int] = []

    async def model(scope: Scope, receive: Receive, send: Send) -> None:
        body = orjson.loads(await read_body(receive))
        events = call if len(body["messages"]) < rounds else answer
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for event in events:
            made.append(1)
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b""})

    raw = orjson.dumps(
        {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    calls: list[Message] = []

    async def send(message: Message) -> None:
        calls.append(message)
        if len(calls) == 12:
            raise ConnectionResetError("the client is gone")

    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    await asyncio.wait_for(app(http_scope("/v1/messages", raw), client_receive(raw), send), 10)

    assert len(calls) == 12  # the one that raised was the last
    assert b'"text_delta"' in calls[-1]["body"]
    assert len(made) < len(call) * (rounds - 1) + len(answer) // 2  # the app was stopped, not read to its end
