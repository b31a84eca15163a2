"""Native server tools (docs/native-tools.md): a client that declared Anthropic's web search gets Anthropic's own
record of each search, under the official SDK, and sends it back on its next turn."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import (
    CitationsWebSearchResultLocation,
    ServerToolUseBlock,
    TextBlock,
    WebSearchResultBlock,
    WebSearchToolResultBlock,
)
from conftest import anthropic_client

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.native import NativeOptions, Source, format_sources, search_result
from agentic_middleware.surfaces import ToolResult
from agentic_middleware.testing import RecordedRequest, ScriptedModel, message, tool_use

CANBERRA = Source("https://en.example.org/wiki/Canberra", "Canberra", "Canberra is the capital of Australia.", "3 days")
SYDNEY = Source("https://travel.test/sydney", "Sydney", "Sydney is the largest city of Australia.")
SPAM = Source("https://spam.test/capital", "Capitals!!", "Click here.")
QUESTION = "What is the capital of Australia?"


class Search:
    """A web_search tool that records the options it was given."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = sources
        self.options: list[NativeOptions | None] = []

        @server_tool(name="web_search", description="Search the web.")
        async def web_search(query: str, native_options: NativeOptions | None = None) -> ToolResult:
            self.options.append(native_options)
            return search_result(query, self.sources)

        self.tool = web_search

    def hook(self) -> ServerTools:
        return ServerTools([self.tool], native={"web_search": "web_search"})


def native_tool(**options: Any) -> dict[str, Any]:
    return {"type": "web_search_20250305", "name": "web_search", **options}


def own_vocabulary(request: RecordedRequest) -> list[dict[str, Any]]:
    """The request's messages, checked to hold only what the app itself speaks."""
    messages: list[dict[str, Any]] = request.body["messages"]
    for turn in messages:
        for block in turn["content"] if isinstance(turn["content"], list) else ():
            assert block["type"] in ("text", "tool_use", "tool_result"), block
            assert "citations" not in block, block
    return messages


def searching_model(*queries: str, answer: str) -> ScriptedModel:
    """Searches once per query, each in its own round with a word before it, then answers."""
    rounds = [message(f"Searching for {query}.", tool_use("web_search", {"query": query})) for query in queries]
    return ScriptedModel(*rounds, message(answer, usage={"input_tokens": 30, "output_tokens": 7}))


ANSWER = f"The capital is Canberra ({CANBERRA.url})."


async def test_the_anthropic_sdk_reads_the_record_of_each_search_and_its_citations() -> None:
    search = Search([CANBERRA, SPAM, SYDNEY])
    model = searching_model("capital of Australia", answer=ANSWER)
    location = {"type": "approximate", "city": "Sydney", "country": "AU"}
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool(max_uses=3, blocked_domains=["spam.test"], user_location=location)],  # type: ignore[list-item]
    )

    preamble, used, found, answer = reply.content
    assert isinstance(preamble, TextBlock) and preamble.text == "Searching for capital of Australia."
    assert isinstance(used, ServerToolUseBlock)
    assert used.id.startswith("srvtoolu_") and used.name == "web_search"
    assert used.input == {"query": "capital of Australia"}
    assert isinstance(found, WebSearchToolResultBlock) and found.tool_use_id == used.id
    assert isinstance(found.content, list)
    assert all(isinstance(result, WebSearchResultBlock) for result in found.content)
    assert [(r.url, r.title, r.page_age) for r in found.content] == [
        (CANBERRA.url, "Canberra", "3 days"),
        (SYDNEY.url, "Sydney", None),
    ]
    assert isinstance(answer, TextBlock) and answer.text == ANSWER
    (citation,) = answer.citations or []
    assert isinstance(citation, CitationsWebSearchResultLocation)
    assert (citation.url, citation.title, citation.cited_text) == (CANBERRA.url, "Canberra", CANBERRA.text)
    assert reply.usage.server_tool_use is not None and reply.usage.server_tool_use.web_search_requests == 1
    assert reply.usage.input_tokens == 40 and reply.usage.output_tokens == 12  # both calls of the app
    assert reply.stop_reason == "end_turn"

    # The options reached the tool; the blocked domain left the results the model read too.
    (options,) = search.options
    assert options is not None and options.blocked_domains == ("spam.test",) and options.max_uses == 3
    assert options.user_location == {"city": "Sydney", "country": "AU"}
    read = model.requests[1].body["messages"][-1]["content"][0]["content"]
    assert read == format_sources("capital of Australia", [CANBERRA, SYDNEY])
    assert model.requests[0].body["tools"] == [
        {"name": "web_search", "description": "Search the web.", "input_schema": search.tool.input_schema}
    ]


async def test_the_sdk_message_sent_back_is_a_valid_next_turn_in_the_app_s_own_vocabulary() -> None:
    search = Search([CANBERRA])
    model = searching_model("capital", "population of Canberra", answer=ANSWER)
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[search.hook()]))
    tools = [native_tool()]
    first = await client.messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=tools,  # type: ignore[list-item]
    )
    assert [block.type for block in first.content] == [
        *("text", "server_tool_use", "web_search_tool_result"),
        *("text", "server_tool_use", "web_search_tool_result"),
        "text",
    ]
    assert first.usage.server_tool_use is not None and first.usage.server_tool_use.web_search_requests == 2

    def next_turn(request: RecordedRequest) -> dict[str, Any]:
        own_vocabulary(request)
        return message("About 470,000 people.")

    model.script.append(next_turn)
    history: list[Any] = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "And how many live there?"},
    ]
    second = await client.messages.create(model="m", max_tokens=100, messages=history, tools=tools)  # type: ignore[arg-type]
    assert [block.type for block in second.content] == ["text"]
    assert second.content[0].text == "About 470,000 people."  # type: ignore[union-attr]

    # What the app got back is the conversation as it had it during the first turn: the same turns, the same texts.
    during_first = model.requests[2].body["messages"]
    sent_back = own_vocabulary(model.requests[3])
    assert len(sent_back) == len(during_first) + 2
    for then, now in zip(during_first, sent_back, strict=False):
        assert then["role"] == now["role"]
        if isinstance(then["content"], list):
            assert [b.get("text", b.get("content")) for b in then["content"]] == [
                b.get("text", b.get("content")) for b in now["content"]
            ]
            assert [b.get("input") for b in then["content"]] == [b.get("input") for b in now["content"]]
    assert sent_back[-2] == {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}
    assert sent_back[-1]["content"] == "And how many live there?"


async def test_past_max_uses_the_search_is_an_error_record_with_anthropic_s_code() -> None:
    search = Search([CANBERRA])
    model = searching_model("one", "two", "three", answer="Done.")
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool(max_uses=1)],  # type: ignore[list-item]
    )
    results = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert isinstance(results[0].content, list) and len(results[0].content) == 1
    for exceeded in results[1:]:
        assert not isinstance(exceeded.content, list)
        assert exceeded.content.type == "web_search_tool_result_error"
        assert exceeded.content.error_code == "max_uses_exceeded"
    assert len(search.options) == 1  # the tool ran once
    assert reply.usage.server_tool_use is not None and reply.usage.server_tool_use.web_search_requests == 1
    told = model.requests[2].body["messages"][-1]["content"][0]
    assert told["is_error"] is True and "max_uses_exceeded" in told["content"]


@pytest.mark.parametrize(
    ("options", "kept"),
    [
        ({"allowed_domains": ["example.org"]}, [CANBERRA]),  # subdomains included
        ({"allowed_domains": ["travel.test/sydney", "spam.test/other"]}, [SYDNEY]),  # with a path: under it only
        ({"blocked_domains": ["spam.test", "en.example.org"]}, [SYDNEY]),
        ({}, [CANBERRA, SPAM, SYDNEY]),
    ],
)
async def test_domain_filters_reach_the_tool_and_hold_on_its_results(
    options: dict[str, Any], kept: list[Source]
) -> None:
    search = Search([CANBERRA, SPAM, SYDNEY])
    model = searching_model("capital", answer="Done.")
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool(**options)],  # type: ignore[list-item]
    )
    (found,) = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert isinstance(found.content, list) and [result.url for result in found.content] == [s.url for s in kept]
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == format_sources("capital", kept)
    (seen,) = search.options
    assert seen is not None and seen.allowed_domains == tuple(options.get("allowed_domains", ()))


async def test_the_stream_gives_the_json_answer_s_blocks() -> None:
    replies = searching_model("capital", "more", answer=ANSWER).script  # the same ids in both runs

    def app() -> AgenticLoopMiddleware:
        return AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[Search([CANBERRA, SYDNEY]).hook()])

    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [native_tool()],
    }
    answer = await anthropic_client(app()).messages.create(**request)
    async with anthropic_client(app()).messages.stream(**request) as stream:
        streamed = await stream.get_final_message()
    assert [block.to_dict() for block in streamed.content] == [block.to_dict() for block in answer.content]
    assert streamed.usage.server_tool_use == answer.usage.server_tool_use
    assert streamed.usage.server_tool_use is not None and streamed.usage.server_tool_use.web_search_requests == 2


async def test_a_client_that_did_not_declare_the_native_tool_sees_no_record() -> None:
    model = searching_model("capital", answer=ANSWER)
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()])).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}]
    )
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].citations is None  # type: ignore[union-attr]
    assert reply.usage.server_tool_use is None


def test_the_options_read_both_providers_shapes() -> None:
    anthropic = NativeOptions.read(
        native_tool(allowed_domains=["a.test"], user_location={"type": "approximate", "city": "X"})
    )
    openai = NativeOptions.read(
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["a.test"]},
            "user_location": {"type": "approximate", "city": "X"},
        }
    )
    chat = NativeOptions.read(
        {"type": "web_search", "user_location": {"type": "approximate", "approximate": {"city": "X"}}}
    )
    assert anthropic.allowed_domains == openai.allowed_domains == ("a.test",)
    assert anthropic.user_location == openai.user_location == chat.user_location == {"city": "X"}
    assert NativeOptions.read(native_tool(max_uses=True)).max_uses is None


def test_a_result_is_cited_where_its_url_stands_alone() -> None:
    from agentic_middleware.native import citations

    text = f"See {CANBERRA.url}. Not {CANBERRA.url}_2, but {CANBERRA.url}"
    assert [start for _, _, start in citations(text, [CANBERRA, CANBERRA])] == [4, text.rindex(CANBERRA.url)]
