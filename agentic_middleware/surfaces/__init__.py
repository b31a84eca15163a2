"""Wire formats: what the loop and the toolkit need to know of each route's bodies, one module per format."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson

from ..error_types import error_status
from ..sse_reader import ServerSentEvent, SSEReader
from ..tool_results import Image as Image
from ..tool_results import Source as Source
from ..tool_results import ToolResult as ToolResult
from .calls import Claims as Claims
from .calls import canonical as canonical
from .calls import claims_of as claims_of
from .calls import field as field
from .calls import part as part
from .calls import tool_name as tool_name
from .calls import with_id as with_id

if TYPE_CHECKING:
    from ..native import NativeCall, NativeFormat, NativeRun


# Which body field each field of a request patch sets, on routes that name them as LiteLLM's patch does.
PATCH_FIELDS: Mapping[str, str] = MappingProxyType(
    {"model": "model", "messages": "messages", "tools": "tools", "max_tokens": "max_tokens"}
)


class StreamMismatch(Exception):
    """The loop's final answer does not continue what the client of a live stream already has."""


class AppStreamError(Exception):
    """The app's event stream carried an error; `body` is that error as the route's JSON error body, `status` the
    one its type stands for (`error_types.py`)."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body.decode(errors="replace"))
        self.body = body
        self.status = error_status(body)


class Pieces:
    """A string that arrives in pieces: each added at constant cost, joined once when read. Every 16 pieces are
    joined into one as they come, so that a long stream of short deltas keeps little more than its text (a piece of
    a few characters is a string object of some 50 bytes more: 64 of them held 3.5 KB for 450 bytes of text)."""

    __slots__ = ("count", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.count = 0

    def add(self, piece: str) -> None:
        self.parts.append(piece)
        self.count += 1
        if self.count == 16:
            self.parts[-16:] = ["".join(self.parts[-16:])]
            self.count = 0

    def __str__(self) -> str:
        return "".join(self.parts)


SPELLED_STRING = rb'[^"\\\x00-\x1f]*+(?:\\[^\x00-\x1f][^"\\\x00-\x1f]*+)*+"'
"""A JSON string's bytes after its opening quote, up to and with its closing quote, as a lane may take them unread
(`MessagesRelay.pass_on`, `ChatRelay.pass_on`): no raw control character (a CR or LF would end the client's SSE line,
not its event), every backslash with the character it escapes, so that the first quote not escaped closes it. One C
call (`re`) checks all of it; what the escapes mean, and whether the bytes are UTF-8, is read when the string is
(`Spelled`), which fails there for a bad one. Its repeats are possessive (`*+`): giving back what one took could only
leave a backslash or a quote next, which neither the next repeat nor the closing quote then takes, so the strings it
takes are the same; the engine keeps no place to go back to, about 300 of the 2,600 instructions a match costs on a
text delta (callgrind; a match is about a fifth of what the middleware adds per delta)."""

PADDED_END = b'"}\n\n'  # how an OpenAI event that ends in its `obfuscation` padding ends: the lanes compare it


class Spelled(bytearray):
    """A string that arrives in pieces, kept as the JSON strings that spelled them, without their quotes and each
    followed by `","` (`a","b","`), and read once, when joined: each piece is read as the client's SDK reads it, on
    its own. A piece that came as JSON is kept as it was spelled (`MessagesRelay.pass_on`), so that its text costs
    nothing until its block ends, provided it is spelled as `SPELLED_STRING` takes it: then every escape in it is
    whole but a `\\u` one (four digits). Where no piece holds an escaped quote, every quote is a separator's, so
    the pieces are read as one string once the separators are taken out; where one does (`\\"` then a comma would
    look like one), or where a `\\u` escape may be cut between two pieces, as one JSON array, each piece an item
    (which holds an object for each piece until joined). A character's UTF-8 may be cut between two pieces too (the
    client's SDK decodes each event's line on its own, and raises on it): the separators, kept in the one-string
    reading's bytes until then, make such a cut invalid UTF-8, which is checked first. One that cannot be read fails
    when joined (`str` raises `ValueError`): the block's text is not known."""

    __slots__ = ()

    def add(self, piece: str) -> None:
        self += orjson.dumps(piece)[1:-1]
        self += b'","'

    def __str__(self) -> str:
        if not self:
            return ""
        if self.find(b'\\"') >= 0 or self.find(b"\\u") >= 0:
            return "".join(orjson.loads(b'["' + self[:-3] + b'"]'))
        if not self.isascii():
            self.decode()  # each piece UTF-8 on its own: a character cut between two is none (`UnicodeDecodeError`)
        whole = self.replace(b'","', b"")
        whole.insert(0, 34)  # the quotes around it
        whole.append(34)
        text: str = orjson.loads(whole)
        return text


class StreamRelay(ABC):
    """One streaming client's response in one wire format, across every round of its loop (`Surface.relay`).

    The live stream makes one per client request. Each call of the model app is a round: `begin_round`,
    then `feed` with each of the app's events in order; what `feed` returns goes to the client at once.
    Text and thinking go out as they come; tool calls, and the round's end, are held, since only at the
    end of the round can a hook claim them. Whatever goes out is rewritten to belong to one client
    stream (one message start, increasing block indexes, one id). At the end of the round `body` is the
    answer the hooks judge. When the loop is done, `finish` ends the client's stream with its answer.
    """

    __slots__ = ()  # a relay of its own may have them: thousands of streams each hold one

    def keepalive(self) -> bytes | None:
        """A keep-alive in the stream's own terms, numbered where the stream is, for clients that reset their idle
        timers on events only (Codex ignores SSE comments); None: the surface's own `keepalive`."""
        return None

    @abstractmethod
    def begin_round(self) -> None:
        """A new call of the app: what the last round held back is dropped (a hook claimed it), never sent."""

    @abstractmethod
    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        """The client's events for one of the app's events, to send now; empty when held back or only read.

        Raises `AppStreamError` for the app's error event; any other exception means an unreadable stream.
        """

    def read(self, reader: SSEReader, chunk: bytes, out: list[bytes], offered: bool = False) -> None:
        """Add to `out` the client's events for one more chunk of the round's stream, read by `reader`: a whole event
        the relay passes on unread (`pass_on`), else each event the reader completes, fed in turn. What was added
        before a failure stays in `out`. `offered`: `pass_on` was asked of this chunk already and declined it (the
        live round's lane asks first), so it is not asked again."""
        if not offered and reader.begins(chunk):
            passed = self.pass_on(chunk)
            if passed is not None:
                if passed:
                    out.append(passed)
                return
        for event in reader.feed(chunk):
            out += self.feed(event)

    def pass_on(self, chunk: bytes) -> bytes | None:
        """What the client gets now for `chunk`, one whole event that came between two events, when the relay can take
        it without the SSE reader and pass it on without re-encoding it (reading it as `feed` would): the cheap path
        for most of a stream. Empty: taken, with nothing for the client now (held, or dropped as `feed` drops it). None
        (the default): the reader reads it, and `feed` takes it."""
        return None

    @abstractmethod
    def body(self) -> dict[str, Any] | None:
        """The round's answer exactly as the app returns it without streaming; None if its stream ended early."""

    @abstractmethod
    def finish(
        self, final: Mapping[str, Any], fresh: bool = False, built: Mapping[str, Any] | None = None
    ) -> list[bytes]:
        """The events that end the client's stream with `final`, the loop's answer (hooks applied, usage summed).

        What the client has of the last round must begin `final`: the rest of it goes out (the held events
        as the app sent them, when `final` is the round's own answer), then the route's closing events.
        With `fresh`, `final` replaces the last round (a `response_override`) and follows what was sent. `built`: what
        `body` gave at the last round's end (`LiveStream` keeps it), compared with `final` instead of a body built
        again (nothing is read into the relay after a round's end).
        Also called when nothing was streamed (the app answered JSON): then it writes the whole stream.
        Raises `StreamMismatch` when `final` does not continue what the client has.
        """

    def error_event(self, status: int, message: str, code: str) -> bytes | None:
        """The event that reports a failure now, in this stream's state; None: the surface's `error_event`."""
        return None

    def announce(self, search: NativeCall, round: int) -> Sequence[bytes] | None:
        """The client's events for a native call about to be searched (between two rounds: after what the client
        has, in the `round`-th round with native calls). None: records cannot go out now (nothing was streamed yet,
        or the format has none), and go in the final answer instead (see native/live.py)."""
        return None

    def record(self, run: NativeRun, round: int) -> Sequence[bytes] | None:
        """The client's events for what came of a native call (announced just before), and the relay's note of its
        sources, so that later text cites them as the final answer would. None: as for `announce`."""
        return None


class Surface(ABC):
    """One wire format: its hook methods, its tool calls and tool turns, its error shape."""

    name: str
    provider: str  # the default `custom_llm_provider`
    api_surface: str  # LiteLLM's `_agentic_loop_api_surface`
    gates: tuple[str, ...]
    plan_methods: tuple[str, ...]  # in order of preference
    messages_field = "messages"  # the body field that holds the conversation
    chains_by_id = False  # a follow-up names a stored response by its id (`previous_response_id`: chains.py)
    max_description: int | None = None  # the longest tool description the provider takes (tools.py shortens ours)
    patch_fields = PATCH_FIELDS

    def messages(self, body: dict[str, Any]) -> Any:
        """The conversation as hooks receive it in `messages`."""
        return body.get(self.messages_field)

    def request_params(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request without model and conversation: the plan builders' optional parameters (copied in C, the two
        taken out: asked once a round that plans)."""
        params = dict(body)
        params.pop("model", None)
        params.pop(self.messages_field, None)
        return params

    def unsupported(self, body: dict[str, Any]) -> tuple[str, str] | None:
        """The field, and why, when a request of this format cannot take part in the loop: a 400 before any call of
        the app (only for a request that may loop)."""
        return None

    def rerun_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A patched body made ready to send again; a format whose reruns need more than the patch says so here."""
        return body

    @abstractmethod
    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        """Every tool call of a response, as the wire objects, the client's own included."""

    def call_name(self, call: dict[str, Any]) -> str | None:
        """The name of the tool a call is for, None when it has none or two that disagree (`tool_name`: the one
        reading of every check and every runner)."""
        return tool_name(call)

    @abstractmethod
    def call_input(self, call: dict[str, Any]) -> Any:
        """A call's input, parsed (chat sends it as a JSON string; one that does not parse stays a string)."""

    def call_groups(self, response: dict[str, Any]) -> list[list[dict[str, Any]]]:
        """The tool calls of each alternative answer a response holds (chat's `n` choices), one list each."""
        return [self.calls(response)]

    # Whether `fingerprint` reads an answer without changing it (no `JSONObject` read that wraps a nested object in
    # place): then a round takes it from its own parse before any gate is shown that parse, instead of parsing the
    # answer's bytes again once a gate claims (asking.py), the same calls either way.
    fingerprint_reads_only = False

    def fingerprint(self, response: dict[str, Any]) -> tuple[tuple[str, bytes], ...]:
        """All tool calls by name and canonical input; ids and order left out."""
        return tuple(sorted((str(self.call_name(c)), canonical(self.call_input(c))) for c in self.calls(response)))

    def is_claimed(self, call: dict[str, Any], claims: Claims) -> bool:
        return call.get("id") in claims.ids or self.call_name(call) in claims.names

    usage_tokens: tuple[str, str] = ("input_tokens", "output_tokens")  # the usage keys of input and output tokens

    def token_attributes(self, usage: Any) -> dict[str, Any]:
        """OpenTelemetry GenAI token counts of one call's usage."""
        usage = usage if isinstance(usage, dict) else {}
        return {
            "gen_ai.usage.input_tokens": usage.get(self.usage_tokens[0]),
            "gen_ai.usage.output_tokens": usage.get(self.usage_tokens[1]),
        }

    # Whether the route's own provider sums a turn's model calls into the top-level `usage` (Anthropic does, for
    # its server tools, and lists each call in `usage.iterations`); the default of `sum_usage` (accounting.md).
    sums_usage: bool = False

    def usage_entry(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """One model call's usage as an entry of `usage.iterations`: the call's counters, typed `message`."""
        return {"type": "message", **{key: value for key, value in usage.items() if key != "iterations"}}

    @abstractmethod
    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        """A copy of the response without the claimed calls, ending the turn if none of the client's remain."""

    @abstractmethod
    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request body in which the model may call no tool (the closing call): its tools stay declared, since the
        history holds calls to them."""

    @abstractmethod
    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        """The response, with `text` as its answer where it would otherwise have no content at all."""

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        """Each tool call of a request's history that has a result: its name, input and result content."""
        return iter(())

    @abstractmethod
    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        """An error body in the route's own shape (`param`: the request field at fault, where the shape has one)."""

    @abstractmethod
    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        """A final response as the SSE events a streaming client of this route expects."""

    def relay(self, stream_options: Any) -> StreamRelay | None:
        """A relay for one live stream, given the client's `stream_options`; None: this format streams buffered."""
        return None

    @functools.cached_property
    def stream_reader(self) -> Callable[[bytes], dict[str, Any] | bytes]:
        """`accumulated`, bound once for every request of this format (surfaces are made once): a bound method made
        for each request is one more object the collector tracks, held for as long as its stream lasts."""
        return self.accumulated

    def accumulated(self, raw: bytes) -> dict[str, Any] | bytes:
        """The answer a whole event stream of this route holds, as the app returns it without streaming: how an
        event stream answering a call that did not stream is judged. Bytes: the stream's own error event, as the
        route's error body. Raises ValueError for a stream that is not a complete answer of this route."""
        relay = self.relay(None)
        if relay is None:
            raise ValueError("this route has no reader for its streams")
        relay.begin_round()
        try:
            for event in SSEReader().feed(raw):
                relay.feed(event)
        except AppStreamError as error:
            return error.body
        body = relay.body()
        if body is None:
            raise ValueError("it ended before its answer was complete")
        return body

    def streaming_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request body of a live call: what the relay needs from the app added (chat asks for usage)."""
        return body

    def native_format(self) -> NativeFormat | None:
        """How this format shows native server tools the client declared (see native/); None: not at all."""
        return None

    @abstractmethod
    def keepalive(self) -> bytes:
        """An SSE event or comment that keeps a quiet stream open."""

    @abstractmethod
    def error_event(self, status: int, message: str, code: str) -> bytes:
        """An error in the route's own SSE shape, for failures after the stream began."""

    @abstractmethod
    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        """A function tool declared in the request's `tools`."""

    def declared_name(self, tool: Any) -> str | None:
        """The name of a tool the request declares, None when it has none a policy can judge it by (`tool_name`)."""
        return tool_name(tool)

    @abstractmethod
    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        """The turns that answer `calls`: the assistant turn as the model sent it with only these calls, then the
        results, matched by id."""


@functools.cache
def surfaces() -> dict[str, Surface]:
    """Every wire format by name (made once: surfaces hold no state)."""
    from .chat import ChatCompletions
    from .messages import Messages
    from .responses import Responses

    return {surface.name: surface for surface in (Messages(), ChatCompletions(), Responses())}


@functools.cache
def surface_for(api_surface: str) -> Surface:
    """The wire format a hook's `kwargs["_agentic_loop_api_surface"]` names."""
    return next(surface for surface in surfaces().values() if surface.api_surface == api_surface)
