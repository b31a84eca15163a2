"""OpenAI Chat Completions (`POST /v1/chat/completions`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from .. import sse
from ..native import NativeFormat
from ..native.chat import ChatNative
from ..payload import JSONObject
from ..sse_reader import ServerSentEvent
from . import AppStreamError, Claims, Pieces, StreamMismatch, StreamRelay, Surface, ToolResult, field, with_id

ERROR_MARKER = "Error: "


def openai_error_type(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    """OpenAI's error shape, the same on every OpenAI route; `param` names the request field at fault."""
    error = {"message": message, "type": openai_error_type(status), "param": param, "code": code}
    return orjson.dumps({"error": error})


def _messages(response: dict[str, Any]) -> list[dict[str, Any]]:
    choices = response.get("choices")
    return [
        choice["message"]
        for choice in (choices if isinstance(choices, list) else ())
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict)
    ]


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [call for call in (calls if isinstance(calls, list) else ()) if isinstance(call, dict)]


def _include_usage(stream_options: Any) -> bool:
    return isinstance(stream_options, dict) and stream_options.get("include_usage") is True


def _each_choice(response: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of the response with each choice changed, or the response itself when it has no list of choices."""
    choices = response.get("choices")
    if not isinstance(choices, list):
        return response
    return JSONObject(response, choices=[change(choice) for choice in choices])


def _filled_choice(choice: Any, text: str) -> Any:
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict) or message.get("content") or message.get("tool_calls"):
        return choice
    return JSONObject(choice, message=JSONObject(message, content=text))


class ChatCompletions(Surface):
    name = "chat_completions"
    provider = "openai"
    api_surface = "chat_completions"
    usage_tokens = ("prompt_tokens", "completion_tokens")
    max_description = 1024  # OpenAI answers a longer tool description 400 `string_above_max_length`
    gates = ("async_should_run_chat_completion_agentic_loop", "async_should_run_agentic_loop")
    # LiteLLM's chat path also falls back to the messages-style builder when that is all a hook has.
    plan_methods = ("async_build_chat_completion_agentic_loop_plan", "async_build_agentic_loop_plan")

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        return [call for message in _messages(response) for call in _calls(message)]

    def call_groups(self, response: dict[str, Any]) -> list[list[dict[str, Any]]]:
        return [_calls(message) for message in _messages(response)]

    def call_name(self, call: dict[str, Any]) -> Any:
        # Function calls carry `function`; custom tool calls carry `custom`.
        return field(call.get("custom") if call.get("type") == "custom" else call.get("function"), "name")

    def call_input(self, call: dict[str, Any]) -> Any:
        if call.get("type") == "custom":
            return field(call.get("custom"), "input")
        arguments = field(call.get("function"), "arguments")
        try:
            return orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            return arguments

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        return _each_choice(response, lambda choice: self._end_choice(choice, claims))

    def _end_choice(self, choice: Any, claims: Claims) -> Any:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not message.get("tool_calls"):
            return choice
        kept = [call for call in _calls(message) if not self.is_claimed(call, claims)]
        message = JSONObject(message, tool_calls=kept)
        choice = JSONObject(choice, message=message)
        if not kept:
            del message["tool_calls"]
            if message.get("content") is None:
                message["content"] = ""
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        return choice

    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tool_choice": "none"} if body.get("tools") else body

    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        return _each_choice(response, lambda choice: _filled_choice(choice, text))

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        calls: dict[Any, dict[str, Any]] = {}
        for turn in messages if isinstance(messages, list) else ():
            if not isinstance(turn, dict):
                continue
            calls.update((call.get("id"), call) for call in _calls(turn))
            made = calls.get(turn.get("tool_call_id")) if turn.get("role") == "tool" else None
            if made is not None:
                yield self.call_name(made), self.call_input(made), turn.get("content")

    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        return openai_error_body(status, message, code, param)

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.chat_chunks(response, _include_usage(stream_options))

    def relay(self, stream_options: Any) -> StreamRelay:
        return ChatRelay(_include_usage(stream_options))

    def streaming_request(self, body: dict[str, Any]) -> dict[str, Any]:
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return body
        return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}

    def native_format(self) -> NativeFormat:
        return _NATIVE

    def keepalive(self) -> bytes:
        return sse.chat_keepalive()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        return sse.chat_error(message, openai_error_type(status), code)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}

    def declared_name(self, tool: Any) -> Any:
        if not isinstance(tool, dict):
            return None
        return field(tool.get("function") or tool.get("custom"), "name") or tool.get("name")

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # The choice that made these calls goes on (with `n` > 1, the others are alternatives, not history).
        messages = _messages(response)
        made = next((m for m in messages if any(c is call for c in _calls(m) for call in calls)), None)
        if made is None and messages:
            made = messages[0]
        assistant: dict[str, Any] = dict(made) if made else {"role": "assistant", "content": None}
        calls = [with_id(call, "call_") for call in calls]
        assistant["tool_calls"] = calls
        return [
            assistant,
            *(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": f"{ERROR_MARKER}{result.as_text()}" if result.is_error else result.as_text(),
                }
                for call, result in zip(calls, results, strict=True)
            ),
        ]


_NOTHING: tuple[bytes, ...] = ()
_TOP_FIELDS = ("system_fingerprint", "service_tier")
_SET_FIELDS = frozenset({"role", "id", "type", "name", "index"})  # repeated whole, never appended to
_SEPARATOR = "\n\n"  # between the text of two rounds, which a chat client reads as one string


class ChatRelay(StreamRelay):
    """A Chat Completions stream across rounds: one `id` and `created`, the role sent once per choice, the
    text of later rounds set off from earlier text by a blank line, and one finish, usage and `[DONE]`.

    Within a round, everything from the first tool call delta or `finish_reason` on is held; the usage
    chunk (asked of the app for summing) is read, and reaches the client only if it asked for usage.
    """

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.head: tuple[Any, Any] | None = None  # the client's `id` and `created`
        self.opened: set[int] = set()  # choices whose role went out
        # Choices with text from earlier rounds: the length of that text in the client's content, separators included.
        self.before: dict[int, int] = {}
        self.sent: dict[int, dict[str, Any]] = {}
        self.holding = False
        self.choices: dict[int, dict[str, Any]] = {}
        self.begin_round()

    def begin_round(self) -> None:
        for index, message in self.sent_messages().items():
            text = message.get("content")
            if isinstance(text, str) and text:
                self.before[index] = self.offset(index) + len(text)
        self.sent = {}  # the messages as they stood when holding began: what the client has of this round
        self.separated: set[int] = set()
        self.holding = False
        self.held: list[bytes] = []
        self.top: dict[str, Any] | None = None
        self.choices = {}
        self.calls: dict[int, dict[int, dict[str, Any]]] = {}
        self.usage: Any = None

    def offset(self, index: int) -> int:
        """Where this round's text of a choice begins in the client's content: after earlier rounds' text and the
        blank line that sets it off."""
        return self.before[index] + len(_SEPARATOR) if index in self.before else 0

    def sent_messages(self) -> dict[int, dict[str, Any]]:
        if self.holding:
            return self.sent
        return {index: _message(choice) for index, choice in self.choices.items()}

    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        if event.data == b"[DONE]":
            return _NOTHING
        chunk = orjson.loads(event.data)
        if chunk.get("error"):
            raise AppStreamError(event.data)
        if self.top is None:
            self.top = {key: chunk.get(key) for key in ("id", "created", "model")}
            self.top.update({key: chunk[key] for key in _TOP_FIELDS if key in chunk})
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices:
            return _NOTHING  # the usage chunk: the client's comes at the end, summed
        if not self.holding and any(
            choice.get("finish_reason") is not None
            or (choice.get("delta") or {}).keys() & {"tool_calls", "function_call"}
            for choice in choices
        ):
            self.holding = True
            self.sent = {index: _message(choice) for index, choice in self.choices.items()}
        for choice in choices:
            self.read_choice(choice)
        client = self.client_chunk(event, chunk, choices)
        if self.holding:
            self.held.append(client)
            return _NOTHING
        return (client,)

    def read_choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = {"message": {}, "pieces": {}, "finish_reason": None, "logprobs": None}
        delta = choice.get("delta") or {}
        calls = delta.get("tool_calls")
        if calls:
            known = self.calls.setdefault(index, {})
            for call in calls:
                _merge(known.setdefault(call.get("index", 0), {}), call)
        pieces = state["pieces"]
        for key, value in delta.items():
            if isinstance(value, str) and key not in _SET_FIELDS:
                text = pieces.get(key)
                if text is None:
                    text = pieces[key] = Pieces()
                text.add(value)  # joined once, when the message is read
            elif key != "tool_calls":
                _merge(state["message"], {key: value})
        if choice.get("finish_reason") is not None:
            state["finish_reason"] = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            known_logprobs = state["logprobs"] = state["logprobs"] or {}
            for key, value in logprobs.items():
                old = known_logprobs.get(key)
                known_logprobs[key] = old + value if isinstance(old, list) and isinstance(value, list) else value

    def client_chunk(self, event: ServerSentEvent, chunk: dict[str, Any], choices: list[Any]) -> bytes:
        """The chunk as the client gets it: rewritten only where it has to be."""
        rewritten = False
        head = (chunk.get("id"), chunk.get("created"))
        if self.head is None:
            self.head = head
        elif head != self.head:
            chunk["id"], chunk["created"] = self.head
            rewritten = True
        if not self.include_usage and "usage" in chunk:
            del chunk["usage"]
            rewritten = True
        for choice in choices:
            index = choice.get("index", 0)
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if "role" in delta:
                if index in self.opened:
                    del delta["role"]
                    rewritten = True
                self.opened.add(index)
            text = delta.get("content")
            if index in self.before and index not in self.separated and isinstance(text, str) and text:
                delta["content"] = _SEPARATOR + text
                self.separated.add(index)
                rewritten = True
        return sse.data_event(chunk) if rewritten or event.event else event.encode()

    def body(self) -> dict[str, Any] | None:
        if self.top is None or not self.choices:
            return None
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            if state["finish_reason"] is None:
                return None
            message = {"role": "assistant", "content": None, **_message(state)}
            if calls := self.calls.get(index):
                message["tool_calls"] = [
                    {key: value for key, value in calls[position].items() if key != "index"}
                    for position in sorted(calls)
                ]
            choice = {"index": index, "message": message, "finish_reason": state["finish_reason"]}
            if state["logprobs"] is not None:
                choice["logprobs"] = state["logprobs"]
            choices.append(choice)
        body = {
            "id": self.top["id"],
            "object": "chat.completion",
            "created": self.top["created"],
            "model": self.top["model"],
            **{key: self.top[key] for key in _TOP_FIELDS if key in self.top},
            "choices": choices,
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body

    def finish(self, final: Mapping[str, Any], fresh: bool = False) -> list[bytes]:
        choices = final.get("choices")
        choices = choices if isinstance(choices, list) else []
        head_id, created = self.head or (final.get("id"), final.get("created"))
        base = sse.chat_base({**final, "id": head_id, "created": created}, self.include_usage)
        events: list[bytes] = []
        answer = None if fresh else self.body()
        if answer is not None and choices == answer["choices"]:
            events += self.held
        else:
            streamed = self.sent_messages()
            sent = {} if fresh else streamed  # an override follows what was streamed; else it must continue it
            indexes = set()
            for position, choice in enumerate(choices):
                index = choice.get("index", position) if isinstance(choice, dict) else position
                indexes.add(index)
                message = choice.get("message") if isinstance(choice, dict) else None
                rest = _rest(message if isinstance(message, dict) else {}, sent.get(index, {}))
                text = rest.get("content")
                had_text = index in self.before or streamed.get(index, {}).get("content")
                if had_text and not sent.get(index, {}).get("content") and isinstance(text, str) and text:
                    rest["content"] = _SEPARATOR + text
                if isinstance(rest.get("annotations"), list):  # they point into the final text: moved to the client's
                    now = streamed.get(index, {}).get("content") if fresh else None
                    start = self.offset(index) + (len(now) + len(_SEPARATOR) if now else 0)
                    rest["annotations"] = [_moved(annotation, start) for annotation in rest["annotations"]]
                events += sse.chat_choice(base, {**choice, "message": rest}, position, opened=index in self.opened)
            if any(message.get("content") for index, message in sent.items() if index not in indexes):
                raise StreamMismatch("the answer lacks a choice whose text was already streamed")
        events += sse.chat_end(base, final.get("usage"), self.include_usage)
        return events


def _moved(annotation: Any, by: int) -> Any:
    """A `url_citation` annotation with its indexes moved `by` characters."""
    cited = annotation.get("url_citation") if isinstance(annotation, dict) else None
    if not by or not isinstance(cited, dict):
        return annotation
    moved = {key: cited[key] + by for key in ("start_index", "end_index") if isinstance(cited.get(key), int)}
    return {**annotation, "url_citation": {**cited, **moved}}


def _message(state: dict[str, Any]) -> dict[str, Any]:
    """A choice's message as read so far, its streamed strings joined."""
    return {**state["message"], **{key: str(pieces) for key, pieces in state["pieces"].items()}}


def _merge(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Add a delta to what was read: strings are appended (ids, types, names and roles replace), objects
    merged, anything else replaces; a null never erases."""
    for key, value in delta.items():
        old = target.get(key)
        if value is None:
            target.setdefault(key, None)
        elif isinstance(old, str) and isinstance(value, str) and key not in _SET_FIELDS:
            target[key] = old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            merged = dict(old)
            _merge(merged, value)
            target[key] = merged
        else:
            target[key] = value


def _rest(message: Mapping[str, Any], sent: Mapping[str, Any]) -> dict[str, Any]:
    """What of `message` the client does not have, given what it was sent of it."""
    rest = dict(message)
    for key, value in sent.items():
        if key == "role" or value is None:
            continue
        have = message.get(key)
        if isinstance(value, str):
            if not isinstance(have, str) or not have.startswith(value):
                raise StreamMismatch(f"the answer's {key} differs from what was already streamed")
            rest[key] = have[len(value) :]
        elif have != value:
            raise StreamMismatch(f"the answer's {key} differs from what was already streamed")
        else:
            del rest[key]
    return rest


_NATIVE = ChatNative()
