"""What became of one tool call on the wire, so that a call is run at most once and fails alone.

The session (session.py) sets an `Attempt` in `sent_to` around each `tools/call`; the SDK sends the call from a
task carrying the caller's context, so what is here sees that call's attempt and marks on it whether the call was
handed to the server, refused by it, and how much of its answer was read.

`CallGuard` wraps the HTTP transport under the SDK's streamable HTTP client. The SDK ends the whole session when
one POST fails below HTTP (its writer task dies), and reads an error status without a JSON-RPC body as a bare
"Server returned an error response": for a `tools/call` POST, the guard turns both into that call's JSON-RPC error,
saying whether the call may have reached the server, so one call's 413 or broken connection is its own error and
never the other calls'. It also refuses a JSON answer declared larger than `max_result_bytes` (the SDK bounds SSE
events only, and reads a JSON body whole).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import anyio
import httpx2
import mcp_types
import orjson
from mcp.shared.message import SessionMessage

# Our own JSON-RPC error codes (in the range JSON-RPC leaves to implementations); they never leave the gateway.
NOT_SENT = -32091  # the call's POST never reached the server: its connection could not be made
UNKNOWN = -32092  # the call's POST failed once it may have reached the server: whether it ran is unknown
TOO_LARGE = -32093  # the server's answer is larger than max_result_bytes (an HTTP body, or a stdio line: stdio.py)
REFUSED = -32094  # the server answered the call's POST with an HTTP error status and no JSON-RPC error

ANSWERED = "the MCP server answered HTTP "  # the start of a call's error whose POST got an HTTP error status

NOT_CONNECTED = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.UnsupportedProtocol, httpx2.ProxyError)


@dataclass
class Attempt:
    """One sending of one call, as the transport saw it."""

    sent: bool = False  # handed to the transport: from here on the server may have run it
    refused: bool = False  # the HTTP server answered 404 to the session's id: it ran nothing for it
    received: int = 0  # bytes of the HTTP answer read so far
    status: int = 0  # the HTTP status the server answered the call's POST with (0: none, or stdio)

    @property
    def may_have_run(self) -> bool:
        """Whether the server may have run the call: it was handed over, and not refused for a gone session."""
        return self.sent and not self.refused


sent_to: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("sent_to", default=None)


class _Wrapping:
    """What both stream wrappers pass straight to the SDK's stream they wrap: closing, and `async with`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self.inner.__aexit__(kind, error, trace)
        return result


class _Marking(_Wrapping):
    """The transport's write stream, marking a `tools/call` on its attempt as it is handed over."""

    async def send(self, item: SessionMessage, /) -> None:
        attempt = sent_to.get()
        message = item.message
        if attempt is None or not isinstance(message, mcp_types.JSONRPCRequest) or message.method != "tools/call":
            await self.inner.send(item)
            return
        attempt.sent = True  # before: a send cut short may still have handed it over
        try:
            await self.inner.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            attempt.sent = False  # the stream was closed: nothing was handed over
            raise


class _Watching(_Wrapping):
    """The transport's read stream, telling `ended` when it ends: the server is gone (a stdio server's stdout
    closed when its process died; the HTTP transport ended), so the session is over for every call."""

    def __init__(self, inner: Any, ended: Callable[[], None]) -> None:
        super().__init__(inner)
        self.ended = ended

    @property
    def last_context(self) -> contextvars.Context | None:  # the sender's context, which the SDK's reader reads
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.ended()
            raise

    def __aiter__(self) -> _Watching:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


@contextlib.asynccontextmanager
async def marking(transport: Any, ended: Callable[[], None], *, http: bool) -> AsyncIterator[tuple[Any, Any]]:
    """`transport` (stdio.py's, or the SDK's stdio or streamable HTTP client), its read stream telling `ended` when
    the server is gone. A stdio call is marked sent as it is handed to the pipe's writer; an HTTP one by `CallGuard`,
    as its POST goes (a POST whose connection is refused never reached the server)."""
    async with transport as (read, write):
        yield _Watching(read, ended), write if http else _Marking(write)


def _call_id(request: httpx2.Request) -> Any:
    """The JSON-RPC id of a `tools/call` POST, or None for any other request."""
    if request.method != "POST":
        return None
    try:
        content = request.content
        body = orjson.loads(content) if b'"tools/call"' in content else None  # parsed only for a call
    except (orjson.JSONDecodeError, httpx2.RequestNotRead):
        return None
    return body.get("id") if isinstance(body, dict) and body.get("method") == "tools/call" else None


def _error(request: httpx2.Request, status: int, call_id: Any, code: int, message: str) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": call_id, "error": {"code": code, "message": message}}
    return httpx2.Response(
        status, headers={"content-type": "application/json"}, content=orjson.dumps(body), request=request
    )


class _Counted(httpx2.AsyncByteStream):
    """A response body that counts on the attempt the bytes read of it. A JSON answer (read whole by the SDK) is
    cut once past `limit`: the SDK then fails to parse it, an error of that call alone, which the session reads as
    over `max_result_bytes` from the count."""

    def __init__(self, inner: Any, attempt: Attempt, limit: int | None) -> None:
        self.inner = inner
        self.attempt = attempt
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.attempt.received += len(chunk)
            if self.limit is not None and self.attempt.received > self.limit:
                return
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _reason(response: httpx2.Response) -> str:
    """The start of an error answer's body, read no further."""
    head = b""
    with contextlib.suppress(httpx2.HTTPError):
        async for chunk in response.aiter_raw():
            head += chunk
            if len(head) >= 200:
                break
    await response.aclose()
    return head[:200].decode(errors="replace").strip()


class CallGuard(httpx2.AsyncBaseTransport):
    """The HTTP transport, with a `tools/call` POST's failures made that call's JSON-RPC error (see the module)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_result_bytes: int) -> None:
        self.inner = inner
        self.max_result_bytes = max_result_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        call_id = _call_id(request)
        if call_id is None:
            return await self.inner.handle_async_request(request)
        attempt = sent_to.get()
        if attempt is not None:
            attempt.sent = True  # from here on the server may have it, unless the connection is refused
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.PoolTimeout, *NOT_CONNECTED) as error:
            if attempt is not None:
                attempt.sent = False
            if isinstance(error, httpx2.PoolTimeout):
                return _error(request, 503, call_id, REFUSED, "no connection to the MCP server was free in time")
            return _error(request, 502, call_id, NOT_SENT, f"{type(error).__name__}: {error}")
        except httpx2.TransportError as error:
            return _error(request, 502, call_id, UNKNOWN, f"{type(error).__name__}: {error}")
        if attempt is not None:
            attempt.status = response.status_code
        kind = response.headers.get("content-type", "").lower()
        if response.status_code >= 400 and response.status_code != 404 and not kind.startswith("application/json"):
            reason = await _reason(response)
            said = f"{ANSWERED}{response.status_code}{f': {reason}' if reason else ''}"
            return _error(request, response.status_code, call_id, REFUSED, said)
        length = response.headers.get("content-length", "")
        if kind.startswith("application/json") and length.isdigit() and int(length) > self.max_result_bytes:
            await response.aclose()
            return _error(request, 502, call_id, TOO_LARGE, f"an answer of {length} bytes")
        if attempt is not None:
            json = kind.startswith("application/json")
            response.stream = _Counted(response.stream, attempt, self.max_result_bytes if json else None)
        return response
