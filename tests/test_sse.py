"""SSE replay of a finished response: the official SDKs' stream accumulators are the judges."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from agentic_middleware.sse import (
    chat_chunks,
    chat_error,
    chat_keepalive,
    messages_error,
    messages_events,
    messages_ping,
)
from agentic_middleware.testing import chat_completion, message, tool_call, tool_use

USER: Any = [{"role": "user", "content": "hi"}]


def sse_app(body: Iterable[bytes]) -> Starlette:
    """Both routes answer with the given SSE bytes, whatever the request."""
    chunks = list(body)

    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(iter(chunks), media_type="text/event-stream")

    return Starlette(
        routes=[Route(path, stream, methods=["POST"]) for path in ("/v1/messages", "/v1/chat/completions")]
    )


def parse(body: Iterable[bytes]) -> list[tuple[str | None, Any]]:
    """(event name, data) per SSE event; comments dropped, `[DONE]` kept as a string."""
    events = []
    for raw in b"".join(body).decode().split("\n\n"):
        lines = [line for line in raw.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        assert set(fields) <= {"event", "data"}, raw
        data = fields["data"]
        events.append((fields.get("event"), data if data == "[DONE]" else orjson.loads(data)))
    return events


# --- Anthropic Messages -------------------------------------------------------------------------

THINKING = {"type": "thinking", "thinking": "The user greets me.\nI should greet back.", "signature": "sig_ABC=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
CITATION = {
    "type": "web_search_result_location",
    "cited_text": "Paris is the capital of France.",
    "encrypted_index": "Eo8BCi",
    "title": "Paris",
    "url": "https://example.com/paris",
}
SEARCH: list[dict[str, Any]] = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "capital of France"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.com/paris",
                "title": "Paris",
                "encrypted_content": "EqgfCio",
                "page_age": None,
            }
        ],
    },
    {"type": "text", "text": "Paris is the capital.", "citations": [CITATION]},
]
NESTED = {"city": "Zürich", "when": {"days": [1, 2, 3], "tz": None}, "units": "°C", "tags": [{"k": "v"}], "ok": True}
CACHE_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 2048,
    "cache_read_input_tokens": 4096,
    "cache_creation": {"ephemeral_5m_input_tokens": 2048, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 321,
    "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
    "service_tier": "standard",
}

MESSAGES = {
    "text": message("Hello there! How can I help you today?"),
    "empty text": message(""),
    "tools": message(
        "Let me check both.",
        tool_use("weather", NESTED, id="toolu_1"),
        tool_use("clock", {}, id="toolu_2"),
    ),
    "thinking": message(THINKING, "Hello!"),
    "redacted thinking": message(REDACTED, THINKING, "Hi."),
    "cache usage": message("Cached.", usage=CACHE_USAGE),
    "server tools": message(*SEARCH, usage=CACHE_USAGE),
    "stop sequence": {**message("one two", stop_reason="stop_sequence"), "stop_sequence": "three"},
    "unicode": message("naïve café — 日本語 🎉" * 20, usage={"input_tokens": 3, "output_tokens": 90}),
}


def dump(final: anthropic.types.Message) -> dict[str, Any]:
    """`model_dump`, without the helper's `parsed_output` (structured outputs only) on text blocks."""
    data = final.model_dump()
    for block in data["content"]:
        block.pop("parsed_output", None)
    return data


@pytest.mark.parametrize("chunk_size", [3, 4096])
@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_stream_rebuilds_the_message(name: str, chunk_size: int) -> None:
    body = MESSAGES[name]
    client = anthropic_client(sse_app(messages_events(body, chunk_size=chunk_size)))

    async with client.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()

    expected = anthropic.types.Message.model_validate(body).model_dump()
    assert dump(final) == expected
    assert final.usage.output_tokens == body["usage"]["output_tokens"]


@pytest.mark.parametrize("name", ["tools", "redacted thinking", "server tools"])
async def test_beta_messages_stream_rebuilds_the_message(name: str) -> None:
    body = MESSAGES[name]
    client = anthropic_client(sse_app(messages_events(body, chunk_size=5)))

    async with client.beta.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()

    assert dump(final) == anthropic.types.beta.BetaMessage.model_validate(body).model_dump()  # type: ignore[arg-type]


async def test_messages_wire_format() -> None:
    body = MESSAGES["tools"] | {"usage": CACHE_USAGE}
    events = parse(messages_events(body, chunk_size=8))

    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_start") == names.count("message_stop") == 1
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["stop_sequence"] is None
    assert start["usage"] == {**CACHE_USAGE, "output_tokens": 0}
    blocks = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert blocks == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}},
    ]
    partial = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta" and d["index"] == 1]
    assert len(partial) > 1 and orjson.loads("".join(partial)) == NESTED
    assert [d["index"] for n, d in events if n == "content_block_stop"] == [0, 1, 2]
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 2048,
        "cache_read_input_tokens": 4096,
        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
        "output_tokens": 321,
    }


async def test_thinking_and_redacted_blocks_on_the_wire() -> None:
    events = parse(messages_events(MESSAGES["redacted thinking"]))
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]

    assert starts == [REDACTED, {"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""}]
    assert [delta["type"] for delta in deltas] == ["thinking_delta", "signature_delta", "text_delta"]


async def test_messages_pings_are_ignored() -> None:
    body = MESSAGES["tools"]
    events = list(messages_events(body))
    client = anthropic_client(sse_app([messages_ping(), events[0], messages_ping(), *events[1:]]))

    async with client.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()

    assert dump(final) == anthropic.types.Message.model_validate(body).model_dump()


async def test_messages_error_event_raises_in_the_sdk() -> None:
    events = list(messages_events(message("partial answer")))
    client = anthropic_client(sse_app([*events[:4], messages_error("api_error", "the tool exploded")]))

    with pytest.raises(anthropic.APIStatusError) as raised:
        async with client.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
            await stream.get_final_message()

    assert "the tool exploded" in str(raised.value)
    assert raised.value.body == {"type": "error", "error": {"type": "api_error", "message": "the tool exploded"}}


# --- OpenAI Chat Completions --------------------------------------------------------------------

CHAT_USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 80,
    "total_tokens": 1280,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 64, "audio_tokens": 0},
}
REFUSAL = chat_completion()
REFUSAL["choices"][0]["message"]["refusal"] = "I'm sorry, I can't help with that."
ANNOTATED = chat_completion("Paris is the capital.")
ANNOTATED["choices"][0]["message"]["annotations"] = [
    {
        "type": "url_citation",
        "url_citation": {"start_index": 0, "end_index": 5, "title": "Paris", "url": "https://example.com/paris"},
    }
]
TWO_CHOICES = chat_completion("first answer")
TWO_CHOICES["choices"].append(
    {"index": 1, "message": {"role": "assistant", "content": "second answer"}, "finish_reason": "stop"}
)

CHATS = {
    "text": chat_completion("Hello there! How can I help you today?") | {"system_fingerprint": "fp_123"},
    "tool calls": chat_completion(
        tool_calls=[tool_call("weather", NESTED, id="call_1"), tool_call("clock", {}, id="call_2")]
    ),
    "text and tool call": chat_completion("Checking.", tool_calls=[tool_call("weather", {"city": "Paris"})]),
    "refusal": REFUSAL,
    "annotations": ANNOTATED,
    "cache usage": chat_completion("Cached.", usage=CHAT_USAGE),
    "two choices": TWO_CHOICES,
    "unicode": chat_completion("naïve café — 日本語 🎉" * 20),
}


def chat_dump(completion: openai.types.chat.ChatCompletion) -> dict[str, Any]:
    """`model_dump`, without what the helper adds: `parsed`, `parsed_arguments`, and each tool call's delta `index`."""
    data = completion.model_dump()
    for choice in data["choices"]:
        choice["message"].pop("parsed", None)
        for call in choice["message"].get("tool_calls") or []:
            call["function"].pop("parsed_arguments", None)
            call.pop("index", None)
    return data


@pytest.mark.parametrize("chunk_size", [3, 4096])
@pytest.mark.parametrize("name", list(CHATS))
async def test_chat_stream_helper_rebuilds_the_completion(name: str, chunk_size: int) -> None:
    body = CHATS[name]
    client = openai_client(sse_app(chat_chunks(body, include_usage=True, chunk_size=chunk_size)))

    async with client.chat.completions.stream(
        model="gpt-test", messages=USER, stream_options={"include_usage": True}
    ) as stream:
        final = await stream.get_final_completion()

    expected = openai.types.chat.ChatCompletion.model_validate(body)
    assert chat_dump(final) == expected.model_dump()
    for got, want in zip(final.choices, expected.choices, strict=True):
        assert (got.message.content, got.message.refusal, got.finish_reason) == (
            want.message.content,
            want.message.refusal,
            want.finish_reason,
        )
        got_calls = [(c.id, c.function.name, c.function.arguments) for c in got.message.tool_calls or []]
        want_calls = [(c.id, c.function.name, c.function.arguments) for c in want.message.tool_calls or []]  # type: ignore[union-attr]
        assert got_calls == want_calls
    assert final.usage == expected.usage


async def test_chat_raw_chunks() -> None:
    body = CHATS["tool calls"] | {"usage": CHAT_USAGE}
    client = openai_client(sse_app(chat_chunks(body, include_usage=True, chunk_size=5)))

    stream = await client.chat.completions.create(
        model="gpt-test", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]

    assert {(c.id, c.created, c.model, c.object) for c in chunks} == {
        (body["id"], body["created"], body["model"], "chat.completion.chunk")
    }
    first = chunks[0].choices[0].delta
    assert (first.role, first.content, first.tool_calls) == ("assistant", None, None)
    calls = [call for c in chunks[:-1] for call in c.choices[0].delta.tool_calls or []]
    heads = [call for call in calls if call.id]
    assert [(h.index, h.id, h.type, h.function.name) for h in heads] == [  # type: ignore[union-attr]
        (0, "call_1", "function", "weather"),
        (1, "call_2", "function", "clock"),
    ]
    assert all(call.id is None and call.function.name is None for call in calls if call not in heads)  # type: ignore[union-attr]
    arguments = "".join(call.function.arguments or "" for call in calls if call.index == 0)  # type: ignore[union-attr]
    assert orjson.loads(arguments) == NESTED
    assert [c.choices[0].finish_reason for c in chunks[:-1]].count("tool_calls") == 1
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_unset=True) == CHAT_USAGE


async def test_chat_length_finish_reaches_the_raw_stream() -> None:
    """The stream helper refuses to finish on `length`; the raw chunks still carry it."""
    body = chat_completion("cut sho", finish_reason="length")
    client = openai_client(sse_app(chat_chunks(body, include_usage=False)))

    stream = await client.chat.completions.create(model="gpt-test", messages=USER, stream=True)
    chunks = [chunk async for chunk in stream]

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "cut sho"
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, "length"]


async def test_chat_without_include_usage_has_no_usage_chunk() -> None:
    body = CHATS["text"]
    events = parse(chat_chunks(body, include_usage=False))

    assert events[-1] == (None, "[DONE]")
    assert all(data["choices"] and "usage" not in data for _, data in events[:-1])
    assert all(data["system_fingerprint"] == "fp_123" for _, data in events[:-1])
    assert events[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


async def test_chat_keepalives_are_ignored() -> None:
    body = CHATS["text"]
    chunks = list(chat_chunks(body, include_usage=False))
    client = openai_client(sse_app([chat_keepalive(), chunks[0], chat_keepalive(), *chunks[1:]]))

    async with client.chat.completions.stream(model="gpt-test", messages=USER) as stream:
        final = await stream.get_final_completion()

    assert final.choices[0].message.content == body["choices"][0]["message"]["content"]
    assert final.usage is None


async def test_chat_error_chunk_raises_in_the_sdk() -> None:
    chunks = list(chat_chunks(chat_completion("partial answer"), include_usage=True))
    error = chat_error("the tool exploded", "server_error", "agentic_loop_error")
    assert error.endswith(b"\n\n") and b"[DONE]" not in error
    client = openai_client(sse_app([*chunks[:2], error]))

    stream = await client.chat.completions.create(model="gpt-test", messages=USER, stream=True)
    with pytest.raises(openai.APIError) as raised:
        async for _ in stream:
            pass

    assert raised.value.message == "the tool exploded"
    assert raised.value.body == {
        "message": "the tool exploded",
        "type": "server_error",
        "param": None,
        "code": "agentic_loop_error",
    }


def test_keepalives_and_pings_are_well_formed() -> None:
    assert messages_ping() == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert chat_keepalive() == b": keep-alive\n\n"
    assert parse([messages_error("overloaded_error", "busy")]) == [
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    ]


def test_chat_content_given_as_parts_is_streamed_whole() -> None:
    import orjson

    from agentic_middleware.sse import chat_chunks

    parts = [{"type": "text", "text": "hello"}]
    response = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": parts}, "finish_reason": "stop"}],
    }
    chunks = [orjson.loads(line[6:]) for line in chat_chunks(response, False) if line != b"data: [DONE]\n\n"]
    assert [c["choices"][0]["delta"].get("content") for c in chunks if "content" in c["choices"][0]["delta"]] == [
        None,
        parts,
    ]


# --- Long answers ---------------------------------------------------------------------------------


async def test_a_3_mb_answer_is_a_bounded_number_of_events_the_sdks_rebuild_exactly() -> None:
    """Pieces grow with the string past 16 KB, so every long string is at most `MAX_PIECES` deltas."""
    from agentic_middleware.sse import MAX_PIECES

    text = "".join(f"line {n}: naïve café 日本語\n" for n in range(120_000))[: 3 * 1024 * 1024]
    arguments = {"blob": "z" * 1_000_000}
    body = message(THINKING, text, tool_use("store", arguments, id="toolu_big"))
    events = parse(messages_events(body))
    deltas = [data for name, data in events if name == "content_block_delta"]
    assert len([d for d in deltas if d["delta"]["type"] == "text_delta"]) == MAX_PIECES
    assert len([d for d in deltas if d["delta"]["type"] == "input_json_delta"]) == MAX_PIECES
    async with anthropic_client(sse_app(messages_events(body))).messages.stream(
        model="m", max_tokens=5, messages=USER
    ) as stream:
        final = await stream.get_final_message()
    assert dump(final) == dump(anthropic.types.Message.model_validate(body))

    completion = chat_completion(text, tool_calls=[tool_call("store", arguments)])
    chunks = [data for _, data in parse(chat_chunks(completion, include_usage=False))]
    assert len(chunks) <= 2 * MAX_PIECES + 4  # role, content pieces, call head, argument pieces, finish, [DONE]
    async with openai_client(sse_app(chat_chunks(completion, include_usage=False))).chat.completions.stream(
        model="m", messages=USER
    ) as chat_stream:
        rebuilt = await chat_stream.get_final_completion()
    assert rebuilt.choices[0].message.content == text
    assert rebuilt.choices[0].message.tool_calls[0].function.arguments == orjson.dumps(arguments).decode()  # type: ignore[index, union-attr]
