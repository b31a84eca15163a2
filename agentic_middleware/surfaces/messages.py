"""Anthropic Messages (`POST /v1/messages`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from .. import sse
from ..error_types import ANTHROPIC_TYPES
from ..native import NativeCall, NativeFormat, NativeRun
from ..native.messages import MessagesNative, cited, pair, server_id, server_tool_use
from ..payload import UNREAD, JSONObject, unread_input
from ..sse_reader import ServerSentEvent
from . import AppStreamError, Claims, Pieces, StreamMismatch, StreamRelay, Surface, ToolResult, with_id

# The counters of a `message` entry of `usage.iterations` (the anthropic SDK's BetaMessageIterationUsage).
_ITERATION_TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def _is_tool_use(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _result_content(result: ToolResult) -> str | list[dict[str, Any]]:
    """A tool_result's content: the text alone, or text and image blocks."""
    if not result.images:
        return result.content
    images = [
        {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}
        for image in result.images
    ]
    return [{"type": "text", "text": result.content}, *images] if result.content else images


class Messages(Surface):
    name = "messages"
    provider = "anthropic"
    api_surface = "anthropic_messages"
    gates = ("async_should_run_agentic_loop",)
    plan_methods = ("async_build_agentic_loop_plan",)
    sums_usage = True  # as the API does over the iterations of its own server tools

    def usage_entry(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """A call's usage as the API writes a `message` iteration: the four token counts always there (Claude Code
        sizes its context from the last such entry only when all four are numbers), the cache breakdown if any."""
        entry: dict[str, Any] = {"type": "message"}
        for key in _ITERATION_TOKENS:
            value = usage.get(key)
            entry[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
        if isinstance(usage.get("cache_creation"), Mapping):
            entry["cache_creation"] = usage["cache_creation"]
        return entry

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        content = response.get("content")
        return [block for block in (content if isinstance(content, list) else ()) if _is_tool_use(block)]

    def call_name(self, call: dict[str, Any]) -> Any:
        return call.get("name")

    def call_input(self, call: dict[str, Any]) -> Any:
        return call.get("input")

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        content = response.get("content")
        if not isinstance(content, list):
            return response
        kept = [block for block in content if not (_is_tool_use(block) and self.is_claimed(block, claims))]
        ended = JSONObject(response, content=kept)
        if response.get("stop_reason") == "tool_use" and not any(_is_tool_use(block) for block in kept):
            ended["stop_reason"] = "end_turn"
        return ended

    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tool_choice": {"type": "none"}} if body.get("tools") else body

    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        content = response.get("content")
        blocks = content if isinstance(content, list) else []
        if (content and not isinstance(content, list)) or any(_answers(block) for block in blocks):
            return response
        kept = [block for block in blocks if block.get("type") != "text"]  # an empty text block is refused as history
        return JSONObject(response, content=[*kept, {"type": "text", "text": text}])

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        calls: dict[Any, dict[str, Any]] = {}
        for turn in messages if isinstance(messages, list) else ():
            content = turn.get("content") if isinstance(turn, dict) else None
            for block in content if isinstance(content, list) else ():
                if _is_tool_use(block):
                    calls[block.get("id")] = block
                elif isinstance(block, dict) and block.get("type") == "tool_result":
                    call = calls.get(block.get("tool_use_id"))
                    if call is not None:
                        yield call.get("name"), call.get("input"), block.get("content")

    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": _error_type(status), "message": message}})

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.messages_events(response)

    def relay(self, stream_options: Any) -> StreamRelay:
        return MessagesRelay()

    def native_format(self) -> NativeFormat:
        return _NATIVE

    def keepalive(self) -> bytes:
        return sse.messages_ping()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        # The app's own error type when it gave one (a rerun's `billing_error` stays that), else the status's.
        return sse.messages_error(code if code in ANTHROPIC_TYPES else _error_type(status), message)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "description": description, "input_schema": schema}

    def declared_name(self, tool: Any) -> Any:
        return tool.get("name") if isinstance(tool, dict) else None

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # Thinking and text blocks stay where the model put them (thinking first); other calls are left out.
        answered = {id(call): _as_history(with_id(call, "toolu_")) for call in calls}
        content = [
            answered.get(id(block), block)
            for block in response.get("content") or ()
            if not _is_tool_use(block) or id(block) in answered
        ]
        tool_results = [
            {"type": "tool_result", "tool_use_id": answered[id(call)]["id"], "content": _result_content(result)}
            | ({"is_error": True} if result.is_error else {})
            for call, result in zip(calls, results, strict=True)
        ]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": tool_results}]


_NATIVE = MessagesNative()
_NOTHING: tuple[bytes, ...] = ()


class MessagesRelay(StreamRelay):
    """A Messages stream across rounds: the first `message_start`, blocks renumbered to follow the earlier
    rounds' blocks, and one `message_delta` and `message_stop` at the very end.

    Within a round, everything from the first `tool_use` block on is held: tool calls come last, and
    holding the rest keeps the client's blocks in the app's order. Native records go out between rounds,
    and the text after them gets `citations_delta`s of their results before its `content_block_stop`.
    """

    def __init__(self) -> None:
        self.started = False  # the client has a `message_start`
        self.base = 0  # the client's index of this round's first block
        self.sent = 0  # blocks of this round that went out
        self.recorded = 0  # native record blocks that went out after them
        self.records: list[tuple[NativeRun, str]] = []  # every native call recorded so far, with its block id
        self.announced: dict[int, str] = {}  # the block ids of calls announced and not recorded yet, by call
        self.begin_round()

    def begin_round(self) -> None:
        self.base += self.sent + self.recorded
        self.sent = self.recorded = 0
        self.holding = False
        self.held: list[bytes] = []
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.pieces: dict[tuple[int, str], Pieces] = {}  # streamed strings, joined when their block stops
        self.stopped = False

    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        payload = orjson.loads(event.data)
        kind = payload.get("type") or event.event
        if kind == "content_block_delta":
            index = payload["index"]
            delta = payload["delta"]
            block = self.blocks[index]
            match delta.get("type"):
                case "text_delta":
                    self.piece(index, "text", delta["text"])
                case "input_json_delta":
                    self.piece(index, "input", delta["partial_json"])
                case "thinking_delta":
                    self.piece(index, "thinking", delta["thinking"])
                case "signature_delta":
                    block["signature"] = delta["signature"]
                case "citations_delta":
                    block.setdefault("citations", []).append(delta["citation"])
                case _:
                    _merge(block, {key: value for key, value in delta.items() if key != "type"})
            return self.out(event, kind, payload)
        if kind == "content_block_start":
            index = payload["index"]
            block = self.blocks[index] = dict(payload["content_block"])
            if block.get("type") == "tool_use":
                self.holding = True
            if not self.holding:
                self.sent += 1
            return self.out(event, kind, payload)
        if kind == "content_block_stop":
            index = payload["index"]
            block = self.blocks[index]
            for name in ("text", "thinking", "input"):
                pieces = self.pieces.pop((index, name), None)
                if pieces is None:
                    continue
                text = block.get(name, "") + str(pieces) if name != "input" else str(pieces)
                if name != "input":
                    block[name] = text
                elif text:
                    block["input"] = _tool_input(text)
            if self.records and block.get("type") == "text" and isinstance(block.get("text"), str):
                return self.cite(index, block["text"], self.out(event, kind, payload))
            return self.out(event, kind, payload)
        if kind == "message_start":
            self.message = dict(payload["message"])
            if self.started:
                return _NOTHING
            self.started = True
            return (event.encode() if event.event == kind else sse.named_event(kind, payload),)
        if kind == "message_delta":
            assert self.message is not None, "message_delta before message_start"
            self.message.update(payload.get("delta") or {})
            usage = payload.get("usage") or {}
            self.message["usage"] = {
                **(self.message.get("usage") or {}),
                **{key: value for key, value in usage.items() if value is not None},
            }
            return _NOTHING
        if kind == "message_stop":
            self.stopped = True
            return _NOTHING
        if kind == "error":
            raise AppStreamError(event.data)
        if kind == "ping":
            return _NOTHING  # the live stream sends its own keep-alives
        return self.out(event, kind, payload)  # an event type this version does not know: as it came

    def piece(self, index: int, name: str, text: str) -> None:
        pieces = self.pieces.get((index, name))
        if pieces is None:
            pieces = self.pieces[index, name] = Pieces()
        pieces.add(text)

    def out(self, event: ServerSentEvent, kind: str, payload: dict[str, Any]) -> Sequence[bytes]:
        if self.base and "index" in payload:
            payload["index"] += self.base
            client = sse.named_event(kind, payload)
        else:
            client = event.encode() if event.event == kind else sse.named_event(kind, payload)
        if self.holding:
            self.held.append(client)
            return _NOTHING
        return (client,)

    def cite(self, index: int, text: str, stop: Sequence[bytes]) -> Sequence[bytes]:
        """A text block's stop, after a `citations_delta` for each result of the records so far that it names: the
        citations the final answer of the JSON path has (the round's own answer, which hooks judge, has none)."""
        at = index + self.base
        deltas = [
            sse.named_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": at, "delta": {"type": "citations_delta", "citation": c}},
            )
            for c in cited(text, self.records)
        ]
        if not deltas:
            return stop
        if self.holding:
            self.held[-1:-1] = deltas  # in front of the held stop
            return _NOTHING
        return [*deltas, *stop]

    def announce(self, search: NativeCall, round: int) -> Sequence[bytes] | None:
        """The call's `server_tool_use` block, after what the client has."""
        if not self.started:
            return None
        block_id = self.announced[id(search.call)] = server_id(search.call.get("id"))
        return self.blocks_out([server_tool_use(search, block_id)])

    def record(self, run: NativeRun, round: int) -> Sequence[bytes] | None:
        """The call's `web_search_tool_result` block (with its `server_tool_use` if it was not announced)."""
        if not self.started:
            return None
        block_id = self.announced.pop(id(run.call), None)
        if block_id is None:
            block_id = server_id(run.call.get("id"))
            blocks = pair(run, block_id)
        else:
            blocks = pair(run, block_id)[1:]
        self.records.append((run, block_id))
        return self.blocks_out(blocks)

    def blocks_out(self, blocks: list[dict[str, Any]]) -> list[bytes]:
        """Whole blocks written between two rounds, numbered after what the client has."""
        events: list[bytes] = []
        for block in blocks:
            events += sse.messages_block(self.base + self.sent + self.recorded, block)
            self.recorded += 1
        return events

    def body(self) -> dict[str, Any] | None:
        # Ended by `message_stop`, or by the `message_delta` that gives the stop reason: nothing comes after it but
        # the empty `message_stop`, which the anthropic SDK does not wait for (a stream whose last event lacks the
        # blank line that dispatches it, as the HTML standard reads it, ends so).
        if self.message is None or not (self.stopped or self.message.get("stop_reason") is not None):
            return None
        return {**self.message, "content": [self.blocks[index] for index in sorted(self.blocks)]}

    def finish(self, final: Mapping[str, Any], fresh: bool = False) -> list[bytes]:
        events: list[bytes] = []
        if not self.started:
            events.append(sse.messages_start(final))
            self.started = True
        content = final.get("content")
        content = content if isinstance(content, list) else []
        answer = None if fresh else self.body()
        if answer is not None and content == answer["content"]:
            events += self.held
        else:
            sent = [] if fresh else [self.blocks[index] for index in range(self.sent)]
            more: list[Any] = []
            if content[: len(sent)] != sent:
                rest = _text_rest(sent[-1], content[len(sent) - 1]) if content[: len(sent) - 1] == sent[:-1] else None
                if rest is None:
                    raise StreamMismatch("the answer's content differs from the blocks already streamed")
                more = [{"type": "text", "text": rest}]  # the last text block, extended: the rest is a block of its own
            first = self.base + self.sent
            for position, block in enumerate([*more, *content[len(sent) :]]):
                events += sse.messages_block(first + position, block)
        events += sse.messages_end(final)
        return events


def _text_rest(sent: Any, final: Any) -> str | None:
    """What `final` adds to the text block `sent` when it is that block with more text at its end; else None."""
    if not (isinstance(sent, dict) and isinstance(final, dict) and sent.get("type") == final.get("type") == "text"):
        return None
    old, new = sent.get("text"), final.get("text")
    if not (isinstance(old, str) and isinstance(new, str) and new.startswith(old)):
        return None
    same = {**final, "text": old} == sent
    return new[len(old) :] if same else None


def _tool_input(text: str) -> Any:
    """A streamed call's input: the JSON its `input_json_delta`s join into, else `{"_raw": text}`.

    A model may stream input that is not JSON (cut short, say). The client's SDK accumulates such a stream without
    error, so it is no reason to end the stream: a call the client runs reaches it as the app sent it. Hooks get the
    text as LiteLLM's own streaming loop gives it to them, in an object under `_raw` (so `input.get(...)` works), and
    a claimed call's tool is not run on it: the model reads an error result quoting the text (as with a chat or
    Responses call whose `arguments` are not JSON).
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {UNREAD: text}


def _as_history(call: dict[str, Any]) -> dict[str, Any]:
    """A claimed call as the app's history holds it: a `tool_use` input must be an object, so input that was not
    one, or not JSON at all, is sent as `{}` (its tool result, an error, quotes what the model wrote)."""
    value = call.get("input")
    return call if isinstance(value, dict) and unread_input(value) is None else {**call, "input": {}}


def _merge(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """A delta of a kind this version does not know: strings are appended, anything else replaces."""
    for key, value in delta.items():
        old = target.get(key)
        target[key] = old + value if isinstance(old, str) and isinstance(value, str) else value


def _answers(block: Any) -> bool:
    """Whether a content block is part of an answer (thinking alone, or empty text, is not one)."""
    if not isinstance(block, dict):
        return True
    kind = block.get("type")
    return kind not in ("thinking", "redacted_thinking") and (kind != "text" or bool(block.get("text")))
