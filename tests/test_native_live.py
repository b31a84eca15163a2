"""Native records on live streams (docs/native-tools.md), under uvicorn on 127.0.0.1 with the official SDKs' stream
helpers: each search's record reaches the client as soon as the search completes, and the streamed answer is the JSON
answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import (
    CitationsWebSearchResultLocation,
    ServerToolUseBlock,
    TextBlock,
    WebSearchToolResultBlock,
)
from openai.types.responses import ResponseFunctionWebSearch
from streams import event_stream
from test_native import ANSWER, CANBERRA, QUESTION, SPAM, SYDNEY, WEB_SEARCH, Search, native_tool, own_vocabulary

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.native import NativeOptions, search_result
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

USAGE = {"input_tokens": 30, "output_tokens": 7}


def streamed(body: dict[str, Any]) -> Callable[[RecordedRequest], Any]:
    """A script step that answers with the body as the app's own event stream, a few characters per delta."""
    if "choices" in body:
        return lambda request: event_stream(sse.chat_chunks(body, include_usage=True, chunk_size=5))
    if "output" in body:
        return lambda request: event_stream(sse.responses_events(body, chunk_size=5))
    return lambda request: event_stream(sse.messages_events(body, chunk_size=5))


def clients(url: str) -> tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI]:
    options: Any = {"api_key": "test-key", "max_retries": 0}
    return anthropic.AsyncAnthropic(base_url=url, **options), openai.AsyncOpenAI(base_url=f"{url}/v1", **options)


def messages_request(*tools: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": QUESTION}], "tools": list(tools)}


async def json_and_stream(
    replies: list[dict[str, Any]], hook: Callable[[], ServerTools], request: dict[str, Any]
) -> tuple[anthropic.types.Message, anthropic.types.Message, ScriptedModel]:
    """The JSON answer of the scripted rounds, and the message the SDK's stream helper gets of the same rounds
    streamed by the app."""
    live = ScriptedModel(*(streamed(reply) for reply in replies))
    async with serving(AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[hook()])) as url:
        answer = await clients(url)[0].messages.create(**request)
    async with (
        serving(AgenticLoopMiddleware(live, hooks=[hook()])) as url,
        clients(url)[0].messages.stream(**request) as stream,
    ):
        final = await stream.get_final_message()
    assert all(request.body.get("stream") is True for request in live.requests)  # live: the app streamed every round
    return answer, final, live


def dumped(message_: Any) -> list[dict[str, Any]]:
    return [block.to_dict() for block in message_.content]


@pytest.mark.parametrize("queries", [["capital"], ["capital", "population"]])
async def test_the_stream_gives_the_json_answer_s_records_and_citations(queries: list[str]) -> None:
    rounds = [message(f"Searching for {q}.", tool_use("web_search", {"query": q}), usage=USAGE) for q in queries]
    replies = [*rounds, message(ANSWER, usage=USAGE)]
    answer, final, _ = await json_and_stream(replies, Search([CANBERRA, SYDNEY]).hook, messages_request(native_tool()))

    assert dumped(final) == dumped(answer)
    assert [block.type for block in final.content] == [
        *(["text", "server_tool_use", "web_search_tool_result"] * len(queries)),
        "text",
    ]
    uses = [block for block in final.content if isinstance(block, ServerToolUseBlock)]
    results = [block for block in final.content if isinstance(block, WebSearchToolResultBlock)]
    assert [use.input for use in uses] == [{"query": q} for q in queries]
    assert [result.tool_use_id for result in results] == [use.id for use in uses]
    last = final.content[-1]
    assert isinstance(last, TextBlock) and last.text == ANSWER
    assert last.citations and all(isinstance(c, CitationsWebSearchResultLocation) for c in last.citations)
    assert [c.url for c in last.citations] == [CANBERRA.url]  # one per URL, however many searches found it
    assert final.usage.server_tool_use is not None
    assert final.usage.server_tool_use.web_search_requests == len(queries)
    assert final.usage.server_tool_use == answer.usage.server_tool_use
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        answer.usage.input_tokens,
        answer.usage.output_tokens,
    )


async def test_parallel_searches_stream_as_the_json_answer_and_the_message_goes_back_as_history() -> None:
    both = [tool_use("web_search", {"query": "a"}), tool_use("web_search", {"query": "b"})]
    thinking = {"type": "thinking", "thinking": "Two things to look up.", "signature": "sig"}
    replies = [message(thinking, "Searching twice.", *both, usage=USAGE), message(ANSWER, usage=USAGE)]
    answer, final, live = await json_and_stream(
        replies, Search([CANBERRA]).hook, messages_request(native_tool(max_uses=2))
    )
    assert dumped(final) == dumped(answer)
    assert [block.type for block in final.content] == [
        *("thinking", "text"),
        *("server_tool_use", "web_search_tool_result", "server_tool_use", "web_search_tool_result"),
        "text",
    ]

    # The streamed message sent back: the app gets its own vocabulary, the turns it had during the first turn.
    def next_turn(request: RecordedRequest) -> Any:
        own_vocabulary(request)
        return streamed(message("About 470,000 people."))(request)

    live.script.append(next_turn)
    history: list[Any] = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": final.content},
        {"role": "user", "content": "And how many live there?"},
    ]
    async with (
        serving(AgenticLoopMiddleware(live, hooks=[Search([CANBERRA]).hook()])) as url,
        clients(url)[0].messages.stream(**{**messages_request(native_tool()), "messages": history}) as s,
    ):
        second = await s.get_final_message()
    assert [block.type for block in second.content] == ["text"]
    turns = own_vocabulary(live.requests[2])
    shapes = [[b["type"] for b in t["content"]] if isinstance(t["content"], list) else t["content"] for t in turns]
    assert shapes == [
        QUESTION,
        ["thinking", "text", "tool_use", "tool_use"],
        ["tool_result", "tool_result"],
        ["text"],
        "And how many live there?",
    ]
    read = [result["content"] for result in live.requests[1].body["messages"][-1]["content"]]
    assert [result["content"] for result in turns[2]["content"]] == read  # what the model read during the turn


class GatedSearch:
    """A web search whose "slow" query ends only once the client has the first search's result and sees that the
    slow one is being searched (or after 5 s, which fails the test: a record held until both searches end, or a call
    shown only with its result, never releases it)."""

    def __init__(self) -> None:
        self.first_result_seen = asyncio.Event()
        self.released_by_client: list[bool] = []

        @server_tool(name="web_search", description="Search the web.")
        async def web_search(query: str, native_options: NativeOptions | None = None) -> ToolResult:
            if query == "slow":
                try:
                    await asyncio.wait_for(self.first_result_seen.wait(), 5)
                    self.released_by_client.append(True)
                except TimeoutError:
                    self.released_by_client.append(False)
            return search_result(query, [SYDNEY if query == "slow" else CANBERRA])

        self.hook = ServerTools([web_search], native={"web_search": "web_search"})


async def test_a_first_result_reaches_the_client_before_a_slower_second_search_ends() -> None:
    search = GatedSearch()
    calls = [tool_use("web_search", {"query": "fast"}), tool_use("web_search", {"query": "slow"})]
    model = ScriptedModel(streamed(message("Searching.", *calls)), streamed(message(ANSWER)))
    app = AgenticLoopMiddleware(model, hooks=[search.hook])
    seen: list[str] = []
    async with serving(app) as url, clients(url)[0].messages.stream(**messages_request(native_tool())) as stream:
        async for event in stream:
            if event.type == "content_block_start":
                block = event.content_block
                seen.append(block.type)
                if isinstance(block, WebSearchToolResultBlock) and isinstance(block.content, list):
                    seen.append(block.content[0].url)
                if seen.count("server_tool_use") == 2 and CANBERRA.url in seen:  # the first's result, the second's use
                    search.first_result_seen.set()
        final = await stream.get_final_message()
    assert search.released_by_client == [True]
    assert seen == [
        *("text", "server_tool_use", "web_search_tool_result", CANBERRA.url),
        *("server_tool_use", "web_search_tool_result", SYDNEY.url),
        "text",
    ]
    assert final.usage.server_tool_use is not None and final.usage.server_tool_use.web_search_requests == 2


async def test_a_first_web_search_call_reaches_a_responses_client_before_a_slower_second_search_ends() -> None:
    search = GatedSearch()
    calls = [function_call("web_search", {"query": q}, call_id=f"call_{q}") for q in ("fast", "slow")]
    model = ScriptedModel(streamed(response("Searching.", *calls)), streamed(response(ANSWER)))
    app = AgenticLoopMiddleware(model, hooks=[search.hook])
    done: list[tuple[int, str]] = []
    async with (
        serving(app) as url,
        clients(url)[1].responses.stream(model="m", input=QUESTION, tools=[WEB_SEARCH]) as stream,  # type: ignore[list-item]
    ):
        async for event in stream:
            if event.type == "response.output_item.done":
                done.append((event.output_index, event.item.type))
            if event.type == "response.web_search_call.searching" and (1, "web_search_call") in done:
                search.first_result_seen.set()  # the first search is done, the second is being searched
        final = await stream.get_final_response()
    assert search.released_by_client == [True]
    assert done == [(0, "message"), (1, "web_search_call"), (2, "web_search_call"), (3, "message")]
    assert [item.action.query for item in final.output if isinstance(item, ResponseFunctionWebSearch)] == [  # type: ignore[union-attr]
        *("fast", "slow")
    ]


async def test_max_uses_and_domain_filters_hold_on_a_stream() -> None:
    search = Search([CANBERRA, SPAM, SYDNEY])
    calls = [tool_use("web_search", {"query": "a"}), tool_use("web_search", {"query": "b"})]
    replies = [message("Searching.", *calls), message(ANSWER)]
    request = messages_request(
        native_tool(max_uses=1, blocked_domains=["spam.test"], allowed_domains=["example.org", "travel.test"])
    )
    answer, final, live = await json_and_stream(replies, search.hook, request)
    assert dumped(final) == dumped(answer)
    found, exceeded = [block for block in final.content if isinstance(block, WebSearchToolResultBlock)]
    assert isinstance(found.content, list) and [r.url for r in found.content] == [CANBERRA.url, SYDNEY.url]
    assert not isinstance(exceeded.content, list) and exceeded.content.error_code == "max_uses_exceeded"
    assert final.usage.server_tool_use is not None and final.usage.server_tool_use.web_search_requests == 1
    told = live.requests[1].body["messages"][-1]["content"]
    assert [result.get("is_error", False) for result in told] == [False, True]
    assert "spam.test" not in told[0]["content"]


async def test_a_responses_stream_gives_the_json_answer_s_web_search_calls_live() -> None:
    replies = [
        response(
            "Searching.",
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two searches."}]},
            function_call("web_search", {"query": "capital"}, call_id="call_ws1"),
            function_call("web_search", {"query": "more"}, call_id="call_ws2"),
        ),
        response(ANSWER),
    ]
    search = Search([CANBERRA, SPAM, SYDNEY])
    request: dict[str, Any] = {"model": "m", "input": QUESTION, "tools": [WEB_SEARCH]}
    async with serving(AgenticLoopMiddleware(ScriptedModel(*replies), hooks=[search.hook()])) as url:
        answer = await clients(url)[1].responses.create(**request)
    live = ScriptedModel(*(streamed(reply) for reply in replies))
    events: list[Any] = []
    async with (
        serving(AgenticLoopMiddleware(live, hooks=[search.hook()])) as url,
        clients(url)[1].responses.stream(**request) as stream,
    ):
        events = [event async for event in stream]
        final = await stream.get_final_response()
    assert all(recorded.body.get("stream") is True for recorded in live.requests)

    # (the stream helper's parsed types add `parsed: None`, which exclude_none leaves out)
    assert [item.model_dump(exclude_none=True) for item in final.output] == [
        item.model_dump(exclude_none=True) for item in answer.output
    ]
    assert [item.type for item in final.output] == [
        *("message", "reasoning", "web_search_call", "web_search_call", "message")
    ]  # the reasoning that led to the searches is shown with them, as in the JSON answer
    calls = [item for item in final.output if isinstance(item, ResponseFunctionWebSearch)]
    assert [call.action.query for call in calls] == ["capital", "more"]  # type: ignore[union-attr]
    assert [source.url for source in calls[0].action.sources or []] == [CANBERRA.url, SYDNEY.url]  # type: ignore[union-attr]
    (citation,) = final.output[-1].content[0].annotations  # type: ignore[union-attr]
    assert citation.url == CANBERRA.url  # type: ignore[union-attr]  # one per URL of the round's results

    # One lifecycle, numbered throughout; each item at its place in the output, the searches' stages in order.
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added = [event for event in events if event.type == "response.output_item.added"]
    done = [event for event in events if event.type == "response.output_item.done"]
    assert [(event.output_index, event.item.type) for event in added] == list(
        enumerate(item.type for item in final.output)
    )
    assert [event.item.id for event in done] == [item.id for item in final.output]  # type: ignore[union-attr]
    for position, call in ((2, calls[0]), (3, calls[1])):
        stages = [event for event in events if event.type.startswith("response.web_search_call.")]
        mine = [event.type.rsplit(".", 1)[1] for event in stages if event.item_id == call.id]  # type: ignore[union-attr]
        assert mine == ["in_progress", "searching", "completed"]
        assert {event.output_index for event in stages if event.item_id == call.id} == {position}  # type: ignore[union-attr]
    assert sum(event.type == "response.output_text.annotation.added" for event in events) == 1

    # The output items sent back as input: the app gets its own function calls and outputs.
    live.script.append(streamed(response("About 470,000.")))
    history = [{"role": "user", "content": QUESTION}, *(item.model_dump() for item in final.output)]
    async with (
        serving(AgenticLoopMiddleware(live, hooks=[search.hook()])) as url,
        clients(url)[1].responses.stream(**{**request, "input": history}) as stream,
    ):
        follow = await stream.get_final_response()
    assert follow.output_text == "About 470,000."
    items = live.requests[2].body["input"]
    assert [item.get("type", "message") for item in items] == [
        *("message", "message", "reasoning", "function_call", "function_call_output"),
        *("function_call", "function_call_output", "message"),
    ]
    read = [item["output"] for item in live.requests[1].body["input"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in items if item.get("type") == "function_call_output"] == read


async def test_a_chat_stream_with_web_search_options_streams_live_with_annotations() -> None:
    replies = [
        chat_completion("Searching.", tool_calls=[tool_call("web_search", {"query": "capital"})]),
        chat_completion(ANSWER),
    ]
    live = ScriptedModel(*(streamed(reply) for reply in replies))
    async with (
        serving(AgenticLoopMiddleware(live, hooks=[Search([CANBERRA]).hook()])) as url,
        clients(url)[1].chat.completions.stream(
            model="m", messages=[{"role": "user", "content": QUESTION}], web_search_options={}
        ) as stream,
    ):
        final = await stream.get_final_completion()
    assert all(recorded.body.get("stream") is True for recorded in live.requests)
    assert all("web_search_options" not in recorded.body for recorded in live.requests)
    message_ = final.choices[0].message
    assert message_.content == f"Searching.\n\n{ANSWER}"
    (annotation,) = message_.annotations or []
    assert annotation.url_citation.url == CANBERRA.url
    cited = annotation.url_citation  # its indexes point into the client's content, earlier rounds' text included
    assert (message_.content or "")[cited.start_index : cited.end_index] == CANBERRA.url
