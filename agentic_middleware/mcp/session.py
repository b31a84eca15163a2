"""The calls on an MCP server's one session, each made at most once: `Session` is the `Connection` (connection.py,
kept open and reopened) with its `call`.

What a failure means is decided here, from what the transport marked of the call (transport.py): one that never
reached the server is sent again on a new session, one that may have run is not, and the model reads that its
outcome is unknown. What the tools are called and what their results become is `MCPTools`' (tools.py, results.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp.shared.exceptions import MCPError

from ..concurrency import cancel_and_wait
from .connection import Connection
from .transport import ANSWERED, NOT_SENT, TOO_LARGE, UNKNOWN, Attempt, sent_to

OUTCOME_UNKNOWN = (
    "the MCP server became unreachable while the call ran ({}): whether the tool ran is unknown, "
    "and it was not run again"
)


class CallFailed(Exception):
    """A call that gave no result: the message is what the model reads after `<tool> failed: `."""


class Session(Connection):
    """The session to one server, with its calls (the options are `Connection`'s)."""

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """One call, run at most once (the caller bounds the time).

        A call that finds no session open waits for one attempt to reconnect (a server that is down fails it at
        once) and is then sent. A call that was never handed to the server (the session was found closed when it
        was sent, the connection was refused, or the HTTP server answered 404 to the session's id) is sent once
        more on a new session. A call that may have reached the server and got no answer is never sent again:
        the model reads that its outcome is unknown. Such a failure of one call does not end the session: a ping
        asks whether it still lives, and only a session that does not answer it is reopened.
        """
        failure: object = "the session dropped"
        for _ in range(2):
            client = None if self._dropped.is_set() else self._client  # a dropped session takes no more calls
            if client is None:
                if self._outcome is None:
                    self._outcome = asyncio.get_running_loop().create_future()
                outcome = self._outcome
                self._wake.set()
                if self._runner is None or not await asyncio.shield(outcome):
                    failure = "it did not answer the reconnection"
                    break
                client = None if self._dropped.is_set() else self._client
                if client is None:
                    continue
            attempt = Attempt()
            token = sent_to.set(attempt)  # the transport marks on it what became of the call
            self._in_flight += 1
            self._answered.clear()
            try:
                result: mcp_types.CallToolResult | None = await self._unless_dropped(client.call_tool(tool, arguments))
            except MCPError as error:
                if error.code == NOT_SENT or not attempt.may_have_run:
                    failure = error.error.message
                    # The session is gone: reopen it, and send the call on the new one. A 404 to the session's
                    # id cuts no other call: each in flight reads its own answer (its own 404, or its result).
                    self._drop(client, cut=not attempt.refused)
                    continue
                if error.code == TOO_LARGE or attempt.received > self.max_result_bytes:
                    raise CallFailed(self._too_large()) from None
                if attempt.status >= 400:
                    # The server answered the call's POST with an HTTP error status, whatever JSON-RPC code its
                    # body gives (the TypeScript SDK's servers give -32000, the code of a closed connection, to
                    # a 413 or a 400): it was reached, and said so. The status may be the session's, not the
                    # call's: a server that forgot the session (a restart) and answers 400 where the spec says
                    # 404, as the TypeScript SDK's example servers do. The call is not made again (the status
                    # does not say it ran nowhere); whether the session lives is asked, and one that refuses its
                    # `tools/list` is reopened.
                    self._check(client)
                    said = error.error.message
                    if not said.startswith(ANSWERED):
                        said = f"{ANSWERED}{attempt.status}: {said}"
                    raise CallFailed(said) from None
                if error.code in (mcp_types.CONNECTION_CLOSED, UNKNOWN):
                    self._check(client)
                    raise CallFailed(OUTCOME_UNKNOWN.format(error.error.message)) from None
                raise CallFailed(error.error.message) from None
            except (httpx2.TransportError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError) as error:
                if attempt.may_have_run:
                    self._check(client)
                    raise CallFailed(OUTCOME_UNKNOWN.format(error)) from None
                failure = error
                self._drop(client)
                continue
            finally:
                sent_to.reset(token)
                self._in_flight -= 1
                if not self._in_flight:
                    self._answered.set()
            if result is None:  # the session was seen to drop first
                if attempt.may_have_run:
                    raise CallFailed(OUTCOME_UNKNOWN.format("the session dropped"))
                self._drop(client)
                continue
            # Over HTTP and over stdio on POSIX the transport refused a larger answer before reading it whole
            # (transport.py, stdio.py); the SDK's stdio transport on Windows reads any line.
            if sys.platform == "win32" and not isinstance(self.server, str):
                if self._size(result) > self.max_result_bytes:
                    raise CallFailed(self._too_large())
            return result
        raise CallFailed(f"the MCP server is unreachable ({failure})")

    def _too_large(self) -> str:
        return f"its result is over max_result_bytes={self.max_result_bytes} and was not read"

    @staticmethod
    def _size(result: mcp_types.CallToolResult) -> int:
        return len(result.model_dump_json(by_alias=True, exclude_none=True))

    async def _unless_dropped(self, call: Coroutine[Any, Any, Any]) -> Any:
        """The call's result, or None when the session is cut first (over HTTP the SDK would wait on)."""
        calling = asyncio.ensure_future(call)
        dropped = asyncio.ensure_future(self._cut.wait())
        try:
            await asyncio.wait((calling, dropped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            dropped.cancel()
            if not calling.done():
                await cancel_and_wait(calling)
        return None if calling.cancelled() else calling.result()


def reason(error: BaseException) -> str:
    """What went wrong, from the first leaf of the exception groups anyio raises."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
