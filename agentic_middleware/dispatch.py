"""Internal calls of the model app for one client request, and the answers they buffer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any, NamedTuple

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import Headers, replay, with_length
from .capture import Captures, ResponseCapture
from .errors import ModelAppError, ModelAppTimeout
from .observe import MAPPINGS, RoundRecord
from .payload import dumps, own_size, parse_object
from .retries import RETRY_STATUSES, Retries
from .sniff import warn_unjudged

# Request headers each call sets for itself: the middleware reads every answer, so none is compressed.
_PER_CALL = frozenset((b"accept-encoding", b"content-length", b"transfer-encoding"))


class Reply(NamedTuple):
    """The one response the client gets: a start message and the whole body."""

    start: Message
    body: bytes


class Answer:
    """A buffered answer: the app's start message, the body's bytes, and the object hooks see.

    `rewritten` tells that the bytes are no longer the app's, so the headers need a new content-length.
    """

    __slots__ = ("data", "raw", "rewritten", "start")

    def __init__(self, start: Message, raw: bytes, data: Any, rewritten: bool = False) -> None:
        self.start = start
        self.raw = raw
        self.data = data
        self.rewritten = rewritten

    def as_sent(self) -> Any:
        """The body as its bytes hold it: the app's answer as it sent it, whatever hooks changed in `data` since
        (a fresh parse, for the rare paths that build from the answer: the closing call, a refused or ended round)."""
        parsed = parse_object(self.raw)
        return self.data if parsed is None else parsed

    def usage(self) -> Any:
        """The usage as written, whatever a post hook returned: a mapping's own, else read from the bytes it was
        written as (a pydantic object, such as the SDKs' `Message`), so that a hook's changes count the same."""
        data = self.data if self.data is None or isinstance(self.data, MAPPINGS) else parse_object(self.raw)
        return data.get("usage") if data is not None else None

    def replaced(self, data: Any) -> Answer:
        """This answer's status and headers around another body (serialized now, so errors show here), its bytes at
        their own size: a stream's final reply is one, held while its closing events go out (each write lets the event
        loop run), and orjson's output keeps the 4-8 KB buffer it was written into (`own_size`): thousands of streams
        ending together held that much each (benchmarks case 12, docs/performance.md)."""
        return Answer(self.start, own_size(dumps(data)), data, rewritten=True)

    def reply(self, extra_headers: Iterable[tuple[bytes, bytes]] = ()) -> Reply:
        extra_headers = list(extra_headers)
        if not self.rewritten and not extra_headers:
            return Reply(self.start, self.raw)
        headers = with_length(self.start["headers"], len(self.raw)) if self.rewritten else self.start["headers"]
        return Reply({**self.start, "headers": [*headers, *extra_headers]}, self.raw)


def _leniently(start: Message, raw: bytes, rewritten: bool) -> Answer:
    """A 2xx JSON answer strict JSON refuses, as the SDKs read it: they parse with Python's `json`, which takes a byte
    order mark, UTF-16 and UTF-32, `NaN` and `Infinity`. What they read as an object is judged as that (re-encoded as
    strict JSON, `NaN` as `null`); what they cannot read as one holds no call for them and goes on as sent; what
    cannot be written as strict JSON (a lone surrogate, an integer past 64 bits) cannot be judged and is refused."""
    try:
        value = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return Answer(start, raw, None, rewritten)
    if type(value) is not dict:
        return Answer(start, raw, None, rewritten)
    try:
        strict = orjson.dumps(value)
    except orjson.JSONEncodeError as error:
        raise ModelAppError(f"the model app's answer is JSON the middleware cannot read: {error}") from None
    return Answer({**start, "headers": with_length(start["headers"], len(strict))}, strict, parse_object(strict), True)


class Dispatcher:
    """Calls the wrapped app with the client's scope and a new body each time.

    Routers change the scope they are given (a `Mount` sets `root_path`, the router adds `endpoint`), so every
    call gets a copy of the client's scope of its own, sharing its `state`.
    """

    __slots__ = (
        "app",
        "deadline",
        "forward",
        "forwarded",
        "headers",
        "heard",
        "limit",
        "live",
        "oversize",
        "read_stream",
        "receive",
        "scope",
        "send",
        "timeout",
        "timer",
    )

    def __init__(
        self,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        limit: int,
        timeout: float | None,
        read_stream: Callable[[bytes], object] | None = None,
    ):
        self.app = app
        self.read_stream = read_stream  # an event stream answering a call that did not stream, as its JSON answer
        scope.setdefault("state", {})
        self.scope = scope  # never given to the app itself: each call's is a copy
        # A tuple: it lasts as long as the request, and a list made so is larger by its spare room.
        self.headers = tuple([header for header in scope["headers"] if header[0] not in _PER_CALL])
        self.receive = receive  # what the app receives after its body: the client's, or our disconnect fan-out
        self.send = send
        self.limit = limit
        self.timeout = timeout
        self.forwarded = False
        self.oversize = False
        self.timer: asyncio.Timeout | None = None  # app_timeout, of the call under way
        self.deadline: asyncio.Timeout | None = None  # loop_timeout, of the whole loop: set by the loop
        self.forward = True  # False once the client's response has begun (a stream): every answer is kept
        self.heard = False  # the last call's stream sent the client an event: a retry of it would repeat that
        # A live stream (live.py), which reads each round itself; else each answer is read by a `ResponseCapture`. The
        # stream, not its bound `capture`: a bound method is one more object the collector tracks for the stream's life.
        self.live: Captures | None = None

    def set_headers(self, headers: Headers) -> None:
        """Headers the operator puts on every call; the client's own of the same names are dropped."""
        names = {name for name, _ in headers}
        self.headers = (*((name, value) for name, value in self.headers if name.lower() not in names), *headers)

    def forwarding(self) -> None:
        """An answer starts going to the client: no error reply may follow, and no timeout of ours cuts it
        (it is the client's to wait for, no longer ours)."""
        self.forwarded = True
        for timeout in (self.timer, self.deadline):
            if timeout is not None:
                timeout.reschedule(None)

    async def __call__(self, body: bytes, record: RoundRecord, retries: Retries | None = None) -> Answer | None:
        """One call; None when its answer was not a readable JSON body and went to the client as the app sent it
        (with the loop's headers on a rerun's: `Retries.headers`). Its time in the app is added to its round's `record`.

        With `retries` (a rerun's), a transient failure is tried again as they say, in this same frame: no coroutine
        of the retries' own waits while a stream's round lasts (a gateway holds thousands: benchmarks case 12).
        An answer kept though not readable (while streaming) has no `data`, which ends the loop.
        """
        length, given = _given(body, self.receive)
        del body  # the app's `receive` holds it until the app reads it, and nothing after: a live round lasts minutes
        while True:
            scope = {**self.scope, "headers": [*self.headers, (b"content-length", length)]}
            capture = (ResponseCapture if self.live is None else self.live.capture)(
                self.send,
                None if retries is None else retries.headers,
                self.limit,
                self.forwarding,
                forward=self.forward,
                read_stream=self.read_stream,
            )
            if retries is not None:
                capture.kept = RETRY_STATUSES  # such an answer is kept, not forwarded, so that it can be retried
            self.timer = None
            self.heard = False
            started = perf_counter()
            failure: ModelAppError | None = None
            try:
                if self.timeout is None:
                    await self.app(scope, given, capture.send)
                else:
                    async with asyncio.timeout(self.timeout) as self.timer:
                        await self.app(scope, given, capture.send)
            except Exception as error:
                if capture.forwarded:
                    raise  # the client already has the app's own answer under way
                failure = self.failed(error)
            finally:
                self.heard = capture.heard
                record.app_seconds += perf_counter() - started
            answer = None
            if failure is None:
                try:
                    answer = self.answer(capture)
                except ModelAppError as error:
                    failure = error
            start = None if answer is None else answer.start
            if retries is None or (delay := retries.delay(record, failure, start, self.heard, self.deadline)) is None:
                if failure is not None:
                    raise failure
                return answer
            await retries.wait(record, delay, failure, start)
            length, given = _given(retries.body(), self.receive)

    def failed(self, error: Exception) -> ModelAppError:
        """What an exception out of the app's call is: `app_timeout` when it is the `TimeoutError` of ours that
        expired, else the app's own failure. Both are transient (a rerun is tried again): a `TimeoutError` the app
        raised itself (its own upstream's timeout) is a failure of the app as any other it raises."""
        if isinstance(error, TimeoutError) and self.timer is not None and self.timer.expired():
            return ModelAppTimeout(f"the model app did not answer within app_timeout={self.timeout:g} s")
        failure = ModelAppError(f"the model app failed: {type(error).__name__}")
        failure.transient = True
        failure.__cause__ = error
        return failure

    def answer(self, capture: ResponseCapture) -> Answer | None:
        """What a call that returned gave: its answer, None when it went to the client as the app sent it, or the
        `ModelAppError` it is."""
        if capture.unjudged is not None:
            warn_unjudged(self.app, self.scope["path"], capture.unjudged)
        if capture.refused is not None:  # it may hold a call no hook could judge: it never reaches the client
            raise ModelAppError(capture.refused)
        if capture.forwarded:
            self.oversize = capture.oversize
            return None
        if capture.oversize:
            raise ModelAppError(f"the model app's answer was over max_body_bytes={self.limit}")
        if capture.start is None or not capture.complete:
            broke = ModelAppError("the model app ended a call without a complete response")
            broke.transient = True
            raise broke
        if not capture.readable:
            return Answer(capture.start, capture.body, None, capture.rewritten)
        data = parse_object(capture.body)
        if data is None:
            return _leniently(capture.start, capture.body, capture.rewritten)
        return Answer(capture.start, capture.body, data, capture.rewritten)


def _given(body: bytes, receive: Receive) -> tuple[bytes, Receive]:
    """A call's content-length and the `receive` that gives the app `body` once (a function, so that no frame of the
    dispatcher's holds the bytes while the call lasts)."""
    return str(len(body)).encode(), replay(body, receive)
