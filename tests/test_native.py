"""Native server tools (docs/native-tools.md): a client that declared Anthropic's web search gets Anthropic's own
record of each search, under the official SDK, and sends it back on its next turn."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types import (
    CitationsWebSearchResultLocation,
    ServerToolUseBlock,
    TextBlock,
    WebSearchResultBlock,
    WebSearchToolResultBlock,
)
from conftest import anthropic_client, openai_client
from openai.types.responses import (
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_output_text import AnnotationURLCitation

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool
from agentic_middleware.native import NativeOptions, Source, format_sources, search_result
from agentic_middleware.surfaces import ToolResult
from agentic_middleware.testing import (
    RecordedRequest,
    ScriptedModel,
    chat_completion,
    function_call,
    message,
    response,
    tool_call,
    tool_use,
)

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
            assert block["type"] in ("text", "thinking", "tool_use", "tool_result"), block
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


TRAILING_DOT = Source("https://spam.test./a", "Dot", "A fully qualified host.")
PUNYCODE = Source("https://xn--caf-dma.example/menu", "Café", "The punycode spelling of café.example.")
UNICODE = Source("https://café.example/menu", "Café", "The Unicode spelling of xn--caf-dma.example.")
LOOKALIKE = Source("https://notspam.test/a", "Not spam", "Another host that ends in spam.test.")
DOCS = Source("https://good.test/docs/guide", "Guide", "Under /docs.")
DOCS_PRIVATE = Source("https://good.test/docs-private/keys", "Keys", "Beside /docs, not under it.")


@pytest.mark.parametrize(
    ("options", "kept"),
    [
        ({"blocked_domains": ["spam.test"]}, [PUNYCODE, UNICODE, LOOKALIKE, DOCS, DOCS_PRIVATE]),
        ({"blocked_domains": ["café.example"]}, [TRAILING_DOT, LOOKALIKE, DOCS, DOCS_PRIVATE]),
        ({"blocked_domains": ["xn--caf-dma.example."]}, [TRAILING_DOT, LOOKALIKE, DOCS, DOCS_PRIVATE]),
        ({"allowed_domains": ["good.test/docs"]}, [DOCS]),
        ({"blocked_domains": ["good.test/docs"]}, [TRAILING_DOT, PUNYCODE, UNICODE, LOOKALIKE, DOCS_PRIVATE]),
    ],
)
async def test_domain_filters_match_hosts_as_dns_names_and_paths_on_a_segment_boundary(
    options: dict[str, Any], kept: list[Source]
) -> None:
    search = Search([TRAILING_DOT, PUNYCODE, UNICODE, LOOKALIKE, DOCS, DOCS_PRIVATE])
    model = searching_model("anything", answer="Done.")
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool(**options)],  # type: ignore[list-item]
    )
    (found,) = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert isinstance(found.content, list) and [result.url for result in found.content] == [s.url for s in kept]
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == format_sources("anything", kept)


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


def test_a_result_is_cited_where_its_url_stands_alone() -> None:
    from agentic_middleware.native import citations

    text = f"See {CANBERRA.url}. Not {CANBERRA.url}_2, but {CANBERRA.url}"
    assert [start for _, _, start in citations(text, [CANBERRA, CANBERRA])] == [4, text.rindex(CANBERRA.url)]


# OpenAI Responses and Chat Completions.

WEB_SEARCH = {
    "type": "web_search",
    "filters": {"allowed_domains": ["example.org", "travel.test"]},
    "user_location": {"type": "approximate", "country": "AU"},
}


def responses_model(answer: str = ANSWER) -> ScriptedModel:
    return ScriptedModel(
        response(function_call("web_search", {"query": "capital"}, call_id="call_ws1")),
        response(answer, usage={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37}),
    )


async def test_the_openai_sdk_reads_web_search_call_items_and_url_citations_on_responses() -> None:
    search = Search([CANBERRA, SPAM, SYDNEY])
    model = responses_model()
    answer = await openai_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).responses.create(
        model="m",
        input=QUESTION,
        tools=[WEB_SEARCH],  # type: ignore[list-item]
    )
    call, reply = answer.output
    assert isinstance(call, ResponseFunctionWebSearch)
    assert call.id.startswith("ws_") and call.status == "completed"
    assert call.action.type == "search" and call.action.query == "capital"
    assert [source.url for source in call.action.sources or []] == [CANBERRA.url, SYDNEY.url]
    assert isinstance(reply, ResponseOutputMessage)
    text = reply.content[0]
    assert isinstance(text, ResponseOutputText) and text.text == ANSWER
    (citation,) = text.annotations
    assert isinstance(citation, AnnotationURLCitation)
    assert text.text[citation.start_index : citation.end_index] == CANBERRA.url
    assert (citation.url, citation.title) == (CANBERRA.url, "Canberra")
    assert answer.usage is not None and answer.usage.input_tokens == 30  # the last call's
    assert sum(call["input_tokens"] for call in answer.usage.model_extra["iterations"]) == 40  # type: ignore[index]
    (options,) = search.options
    assert options is not None and options.allowed_domains == ("example.org", "travel.test")
    assert options.user_location == {"country": "AU"}

    # The next turn, with the output items sent back as input: the app gets its own function call and output again.
    model.script.append(response("About 470,000."))
    history = [{"role": "user", "content": QUESTION}, *(item.model_dump() for item in answer.output)]
    client = openai_client(AgenticLoopMiddleware(model, hooks=[search.hook()]))
    follow = await client.responses.create(
        model="m",
        input=[*history, {"role": "user", "content": "How many live there?"}],  # type: ignore[list-item]
        tools=[WEB_SEARCH],  # type: ignore[list-item]
    )
    assert follow.output_text == "About 470,000."
    items = model.requests[2].body["input"]
    assert [item.get("type", "message") for item in items] == [
        *("message", "function_call", "function_call_output", "message", "message")
    ]
    assert items[2]["output"] == model.requests[1].body["input"][-1]["output"]  # what the model read during the turn
    assert items[1]["name"] == "web_search" and orjson.loads(items[1]["arguments"]) == {"query": "capital"}
    assert items[3]["content"][0]["annotations"] == []


async def test_a_responses_stream_reports_the_search_and_gives_the_json_answer() -> None:
    hook = Search([CANBERRA]).hook()
    replies = responses_model().script
    answer = await openai_client(AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[hook])).responses.create(
        model="m",
        input=QUESTION,
        tools=[WEB_SEARCH],  # type: ignore[list-item]
    )
    client = openai_client(AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[hook]))
    async with client.responses.stream(model="m", input=QUESTION, tools=[WEB_SEARCH]) as stream:  # type: ignore[list-item]
        events = [event async for event in stream]
        streamed = await stream.get_final_response()
    # (the stream helper's parsed types add `parsed: None`, which exclude_none leaves out)
    assert [item.model_dump(exclude_none=True) for item in streamed.output] == [
        item.model_dump(exclude_none=True) for item in answer.output
    ]
    stages = [event for event in events if event.type.startswith("response.web_search_call.")]
    assert [event.type.rsplit(".", 1)[1] for event in stages] == ["in_progress", "searching", "completed"]
    assert all(event.item_id == answer.output[0].id and event.output_index == 0 for event in stages)  # type: ignore[union-attr]


async def test_a_chat_client_s_web_search_options_are_served_and_citations_annotated() -> None:
    search = Search([CANBERRA, SYDNEY])
    model = ScriptedModel(
        chat_completion(tool_calls=[tool_call("web_search", {"query": "capital"})]), chat_completion(ANSWER)
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[search.hook()]))
    location = {"type": "approximate", "approximate": {"city": "Sydney", "country": "AU"}}
    completion = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        web_search_options={"user_location": location},  # type: ignore[typeddict-item]
    )
    message_ = completion.choices[0].message
    assert message_.content == ANSWER and message_.tool_calls is None
    (annotation,) = message_.annotations or []
    cited = annotation.url_citation
    assert annotation.type == "url_citation" and (cited.url, cited.title) == (CANBERRA.url, "Canberra")
    assert ANSWER[cited.start_index : cited.end_index] == CANBERRA.url
    assert all("web_search_options" not in request.body for request in model.requests)  # served here, not by the app
    (options,) = search.options
    assert options is not None and options.user_location == {"city": "Sydney", "country": "AU"}

    # Without web_search_options the tool is served as a plain server tool: no annotations.
    model.script += [
        chat_completion(tool_calls=[tool_call("web_search", {"query": "capital"})]),
        chat_completion(ANSWER),
    ]
    plain = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    assert plain.choices[0].message.annotations is None
    assert search.options[-1] is None


async def test_parallel_searches_after_thinking_go_back_as_one_turn_of_calls_and_one_of_results() -> None:
    thinking = {"type": "thinking", "thinking": "Two things to look up.", "signature": "sig"}
    both = [tool_use("web_search", {"query": "a"}), tool_use("web_search", {"query": "b"})]
    model = ScriptedModel(message(thinking, "Searching twice.", *both), message(ANSWER))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()]))
    first = await client.messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool(max_uses=2)],  # type: ignore[list-item]
    )
    assert [block.type for block in first.content] == [
        *("thinking", "text"),
        *("server_tool_use", "web_search_tool_result", "server_tool_use", "web_search_tool_result"),
        "text",
    ]
    assert first.usage.server_tool_use is not None and first.usage.server_tool_use.web_search_requests == 2

    model.script += [message(tool_use("web_search", {"query": "c"})), message("Again.")]  # max_uses is per request
    history: list[Any] = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "Once more?"},
    ]
    second = await client.messages.create(model="m", max_tokens=100, messages=history, tools=[native_tool(max_uses=2)])  # type: ignore[list-item]
    assert second.usage.server_tool_use is not None and second.usage.server_tool_use.web_search_requests == 1
    turns = own_vocabulary(model.requests[2])
    shapes = [[b["type"] for b in t["content"]] if isinstance(t["content"], list) else t["content"] for t in turns]
    assert shapes == [
        QUESTION,
        ["thinking", "text", "tool_use", "tool_use"],
        ["tool_result", "tool_result"],
        ["text"],
        "Once more?",
    ]
    assert turns[1]["content"][0] == thinking


async def test_a_chat_stream_carries_the_annotations() -> None:
    replies = [chat_completion(tool_calls=[tool_call("web_search", {"query": "capital"})]), chat_completion(ANSWER)]
    client = openai_client(AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[Search([CANBERRA]).hook()]))
    async with client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": QUESTION}], web_search_options={}
    ) as stream:
        final = await stream.get_final_completion()
    (annotation,) = final.choices[0].message.annotations or []
    assert annotation.url_citation.url == CANBERRA.url and final.choices[0].message.content == ANSWER


async def test_calls_the_app_sent_without_ids_get_records_that_pair_up() -> None:
    calls = [{"type": "tool_use", "name": "web_search", "input": {"query": query}} for query in ("a", "b")]
    model = ScriptedModel(message(*calls), message(ANSWER))
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool()],  # type: ignore[list-item]
    )
    uses = [block for block in reply.content if isinstance(block, ServerToolUseBlock)]
    results = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert len({use.id for use in uses}) == 2 and all(len(use.id) > len("srvtoolu_") for use in uses)
    assert [result.tool_use_id for result in results] == [use.id for use in uses]


@pytest.mark.parametrize("hosted", ["web_search", "web_search_preview"])
async def test_a_responses_client_that_forces_the_hosted_tool_forces_the_served_function(hosted: str) -> None:
    search = Search([CANBERRA])
    model = responses_model()
    answer = await openai_client(AgenticLoopMiddleware(model, hooks=[search.hook()])).responses.create(
        model="m",
        input=QUESTION,
        tools=[{"type": hosted}],  # type: ignore[list-item]
        tool_choice={"type": hosted},  # type: ignore[arg-type]
        include=["web_search_call.action.sources", "web_search_call.results", "reasoning.encrypted_content"],
    )
    assert isinstance(answer.output[0], ResponseFunctionWebSearch)
    first = model.requests[0].body
    assert first["tool_choice"] == {"type": "function", "name": "web_search"}
    assert [tool["name"] for tool in first["tools"]] == ["web_search"]
    assert first["include"] == ["reasoning.encrypted_content"]  # the app makes no web_search_call items


async def test_a_messages_client_that_forces_the_native_tool_forces_the_served_tool_under_its_own_name() -> None:
    @server_tool(name="search_tool", description="Search the web.")
    async def search_tool(query: str) -> ToolResult:
        return search_result(query, [CANBERRA])

    model = ScriptedModel(message("", tool_use("search_tool", {"query": "capital"})), message(ANSWER))
    hook = ServerTools([search_tool], native={"web_search": "search_tool"})
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[native_tool()],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "web_search", "disable_parallel_tool_use": True},
    )
    assert any(isinstance(block, ServerToolUseBlock) and block.name == "web_search" for block in reply.content)
    first = model.requests[0].body
    assert [tool["name"] for tool in first["tools"]] == ["search_tool"]
    assert first["tool_choice"] == {"type": "tool", "name": "search_tool", "disable_parallel_tool_use": True}


def test_a_native_tool_without_a_record_format_is_refused_when_built() -> None:
    @server_tool(name="fetch", description="Fetch a URL.")
    async def fetch(url: str) -> str:
        return f"<html>page at {url}</html>"

    with pytest.raises(ConfigurationError, match=r"without a record format: \['web_fetch'\]"):
        ServerTools([fetch], native={"web_fetch": "fetch"})


@pytest.mark.parametrize(
    ("answer", "cited"),
    [
        (f"See {CANBERRA.url}.html and {CANBERRA.url}:8080/x for more.", 0),  # longer URLs, not the result's
        (f"See {CANBERRA.url}. Or {CANBERRA.url}, again.", 1),  # the sentence's punctuation ends the URL
    ],
)
async def test_a_url_that_goes_on_past_a_dot_or_colon_is_not_a_citation(answer: str, cited: int) -> None:
    model = searching_model("capital", answer=answer)
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()])).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}], tools=[native_tool()]
    )
    final = reply.content[-1]
    assert isinstance(final, TextBlock) and final.text == answer
    assert len(final.citations or []) == cited


async def test_a_url_that_several_searches_found_is_cited_once_on_messages() -> None:
    model = searching_model("capital", "capital city", "canberra", answer=ANSWER)
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()])).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}], tools=[native_tool()]
    )
    assert sum(isinstance(block, WebSearchToolResultBlock) for block in reply.content) == 3
    final = reply.content[-1]
    assert isinstance(final, TextBlock)
    (citation,) = final.citations or []
    assert isinstance(citation, CitationsWebSearchResultLocation) and citation.url == CANBERRA.url


async def test_the_native_declaration_s_cache_control_stays_on_the_served_tool() -> None:
    model = ScriptedModel(message("Done."))
    own = {"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}
    await anthropic_client(AgenticLoopMiddleware(model, hooks=[Search([CANBERRA]).hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[own, native_tool(cache_control={"type": "ephemeral"})],  # type: ignore[list-item]
    )
    own_tool, served = model.requests[0].body["tools"]
    assert own_tool == own
    assert served["name"] == "web_search" and served["cache_control"] == {"type": "ephemeral"}


async def test_a_failed_search_s_sources_are_not_cited() -> None:
    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> ToolResult:
        return ToolResult("partial failure", is_error=True, sources=(CANBERRA,))

    hook = ServerTools([web_search], native={"web_search": "web_search"})
    model = searching_model("capital", answer=ANSWER)
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook])).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}], tools=[native_tool()]
    )
    (record,) = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert not isinstance(record.content, list)  # an error record, with no results to point into
    final = reply.content[-1]
    assert isinstance(final, TextBlock) and final.text == ANSWER and not final.citations

    answer = await openai_client(AgenticLoopMiddleware(responses_model(), hooks=[hook])).responses.create(
        model="m",
        input=QUESTION,
        tools=[WEB_SEARCH],  # type: ignore[list-item]
    )
    call, message_ = answer.output
    assert isinstance(call, ResponseFunctionWebSearch) and call.status == "failed"
    assert isinstance(message_, ResponseOutputMessage)
    text = message_.content[0]
    assert isinstance(text, ResponseOutputText) and text.annotations == []
