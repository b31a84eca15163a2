"""Native search domain filters read URLs as a browser does (docs/native-tools.md#the-tools-options), and refuse
filters that are not lists of domains with a 400 in the route's shape, under the official SDKs."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import WebSearchToolResultBlock
from conftest import anthropic_client, openai_client
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseFunctionWebSearch

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool
from agentic_middleware.native import NativeOptions, Source, search_result
from agentic_middleware.surfaces import ToolResult
from agentic_middleware.testing import ScriptedModel, chat_completion, function_call, message, response, tool_use


def searching(*urls: str) -> tuple[ScriptedModel, ServerTools]:
    """A model that searches once then answers, and a web_search tool that finds a page at each URL."""

    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> ToolResult:
        return search_result(query, [Source(url, f"Page {n}", "Text.") for n, url in enumerate(urls)])

    model = ScriptedModel(message("Looking.", tool_use("web_search", {"query": "q"})), message("Done."))
    return model, ServerTools([web_search], native={"web_search": "web_search"})


async def kept(filters: dict[str, Any], *urls: str) -> list[str]:
    """The URLs of the search's record the client gets, under the anthropic SDK."""
    model, hook = searching(*urls)
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Search."}],
        tools=[{"type": "web_search_20250305", "name": "web_search", **filters}],  # type: ignore[list-item]
    )
    (record,) = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert isinstance(record.content, list)
    return [result.url for result in record.content]


ALLOWED = {"allowed_domains": ["allowed.com"]}
LOOPBACK = {"blocked_domains": ["127.0.0.1"]}
EVIL = {"blocked_domains": ["evil.com"]}


@pytest.mark.parametrize(
    ("filters", "url", "passes"),
    [
        # A backslash ends the host, as in a browser: this is a page of evil.com (urlsplit read allowed.com).
        (ALLOWED, "http://evil.com\\@allowed.com/x", False),
        (ALLOWED, "http://allowed.com\\@evil.com/x", True),  # and this one of allowed.com
        (ALLOWED, "https://user:pw@allowed.com/x", True),
        (ALLOWED, "https://allowed.com@evil.com/x", False),
        # IPv4 addresses in every form a browser reads as 127.0.0.1
        (LOOPBACK, "http://2130706433/", False),
        (LOOPBACK, "http://0x7f.1/", False),
        (LOOPBACK, "http://0177.0.0.1/", False),
        (LOOPBACK, "http://127.1/", False),
        (LOOPBACK, "http://127.0.0.1./", False),
        (LOOPBACK, "http://[::ffff:127.0.0.1]/", False),  # IPv4-mapped IPv6 reaches the same address
        (LOOPBACK, "http://127.0.0.2/", True),
        ({"blocked_domains": ["[::1]"]}, "http://[0:0::1]/", False),
        ({"blocked_domains": ["2130706433"]}, "http://127.0.0.1/", False),  # the filter's own spelling is read too
        # Percent-encoded, upper-case, trailing-dot hosts; tabs and newlines, which a browser removes
        (EVIL, "http://%65vil.com/", False),
        (EVIL, "HTTP://EVIL.COM./", False),
        (EVIL, " http://ev\til.com/ ", False),
        (EVIL, "http://sub.evil.com:8080/", False),
        (EVIL, "http://notevil.com/", True),
        # Unicode hosts mapped as a browser maps them (UTS 46): full-width dots and letters, percent-encoded too
        (EVIL, "http://evil\u3002com/", False),
        (EVIL, "http://\uff25\uff36\uff29\uff2c.com/", False),
        (EVIL, "http://evil%E3%80%82com/", False),
        ({"blocked_domains": ["fa\u00df.example"]}, "http://xn--fa-hia.example/", False),  # not IDNA 2003's fass
        ({"blocked_domains": ["fa\u00df.example"]}, "http://fass.example/", True),
        # Scheme-less URLs, read as an address bar reads them, `//` inside or not
        (EVIL, "evil.com/x", False),
        (EVIL, "evil.com/a//b", False),
        (EVIL, "//evil.com/x", False),
        (EVIL, "\\\\evil.com/x", False),
        (ALLOWED, "allowed.com/a//b", True),
        # What a filter cannot judge fails closed: no http(s) URL, no host, not a URL at all
        (EVIL, "javascript:alert(1)", False),
        (EVIL, "ftp://other.com/", False),
        (EVIL, "/relative/page", False),
        (EVIL, "http://exa mple.com/", False),
        (EVIL, "", False),
        (ALLOWED, "data:text/html,allowed.com", False),
        # Paths: a backslash is a separator, dot segments resolved, and what stays ambiguous is judged closed
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test\\docs\\keys", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/x/../docs/keys", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs/%2e%2e/x", True),  # the browser opens /x
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs/..%2fx", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/Docs/keys", False),
        ({"allowed_domains": ["good.test/docs"]}, "http://good.test/docs/..%2fprivate", False),
        ({"allowed_domains": ["good.test/docs"]}, "http://good.test/Docs/a", False),
        ({"allowed_domains": ["good.test/docs"]}, "http://good.test/docs/a", True),
        ({"allowed_domains": ["*.good.test"]}, "http://good.test/", False),  # a wildcard: subdomains only
        ({"allowed_domains": ["*.good.test"]}, "http://a.good.test/", True),
        # A `*` in the path stands for any characters (Anthropic's `example.com/*/articles`)
        ({"allowed_domains": ["good.test/*/articles"]}, "http://good.test/2026/articles/a", True),
        ({"allowed_domains": ["good.test/*/articles"]}, "http://good.test/articles", False),
        ({"allowed_domains": ["good.test/*/articles"]}, "http://good.test/2026/articles-old", False),
        ({"blocked_domains": ["good.test/*/private"]}, "http://good.test/a/PRIVATE/x", False),
        ({"allowed_domains": ["good.test/*"]}, "http://good.test/", True),
        # What servers read otherwise than the URL says: a segment's `;parameters` (Tomcat, Jetty drop them, and
        # `..;` is `..` there) and its trailing dots and spaces (IIS drops them) are kept out by a block, and not
        # let in by an allowance
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs;x/keys", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs./keys", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs%20/keys", False),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/open/..;/docs/keys", False),
        ({"allowed_domains": ["good.test/docs"]}, "http://good.test/docs/..;/private", False),
        ({"allowed_domains": ["good.test/docs"]}, "http://good.test/docs/a;v=1", True),
        ({"blocked_domains": ["good.test/docs"]}, "http://good.test/docs-old;x/keys", True),
    ],
)
async def test_result_urls_are_read_as_a_browser_reads_them(filters: dict[str, Any], url: str, passes: bool) -> None:
    assert await kept(filters, url, "http://other.test/") == ([url] if passes else []) + (
        ["http://other.test/"] if "allowed_domains" not in filters else []
    )


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_any_text_as_a_url_is_judged_without_an_error(url: str) -> None:
    for options in (NativeOptions.read(ALLOWED), NativeOptions.read(EVIL)):
        assert options.allows(url) in (True, False)


ANTHROPIC_REFUSED = [
    ({"allowed_domains": "allowed.com"}, "tools[0].allowed_domains must be a list of domain strings, got a string"),
    ({"blocked_domains": {"evil.com": True}}, "tools[0].blocked_domains must be a list"),
    ({"blocked_domains": ["evil.com", 3]}, "tools[0].blocked_domains must be a list"),
    ({"allowed_domains": ["allowed.com:8080"]}, "tools[0].allowed_domains[0] is not a domain"),
    ({"blocked_domains": ["ok.test", "user@evil.com"]}, "tools[0].blocked_domains[1] is not a domain"),
    ({"blocked_domains": [""]}, "tools[0].blocked_domains[0] is not a domain"),
    ({"blocked_domains": ["ftp://evil.com"]}, "tools[0].blocked_domains[0] is not a domain"),
    ({"allowed_domains": ["allowed*.com"]}, "tools[0].allowed_domains[0] is not a domain"),
    # A label no host has would match nothing, so a block of it would block nothing
    ({"blocked_domains": [".com"]}, "tools[0].blocked_domains[0] is not a domain"),
    ({"blocked_domains": ["evil..com"]}, "tools[0].blocked_domains[0] is not a domain"),
    (
        {"blocked_domains": ["evil.com/*/news/*"]},
        "tools[0].blocked_domains[0] is not a domain",
    ),  # one `*`, as Anthropic
    ({"blocked_domains": [f"d{n}.test" for n in range(1001)]}, "tools[0].blocked_domains has 1001 entries"),
    (
        {"allowed_domains": ["allowed.com"], "filters": {"allowed_domains": ["evil.com"]}},
        "tools[0].allowed_domains and tools[0].filters.allowed_domains are both given",
    ),
    ({"max_uses": "2"}, "tools[0].max_uses must be a positive integer"),
    ({"user_location": "Paris"}, "tools[0].user_location must be an object"),
]


@pytest.mark.parametrize(("options", "said"), ANTHROPIC_REFUSED)
async def test_malformed_native_options_are_refused_with_400_in_anthropic_s_shape(
    options: dict[str, Any], said: str
) -> None:
    model, hook = searching("http://allowed.com/")
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[hook], error_details=False))
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "Search."}],
            tools=[{"type": "web_search_20250305", "name": "web_search", **options}],  # type: ignore[list-item]
        )
    assert refused.value.status_code == 400
    assert isinstance(refused.value.body, dict) and refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert said in refused.value.body["error"]["message"]  # shown even with error details hidden
    assert model.requests == []


@pytest.mark.parametrize(
    ("tool", "said"),
    [
        ({"type": "web_search", "filters": {"allowed_domains": "allowed.com"}}, "tools[0].filters.allowed_domains"),
        ({"type": "web_search", "filters": ["allowed.com"]}, "tools[0].filters must be an object"),
        ({"type": "web_search", "filters": {"allowed_domains": ["a b"]}}, "tools[0].filters.allowed_domains[0]"),
        # A filter the gateway would not apply is refused, never read as no filter
        ({"type": "web_search", "filters": {"excluded_domains": ["evil.com"]}}, "tools[0].filters.excluded_domains"),
    ],
)
async def test_malformed_filters_are_refused_with_400_in_the_responses_shape(tool: dict[str, Any], said: str) -> None:
    model, hook = searching("http://allowed.com/")
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client(AgenticLoopMiddleware(model, hooks=[hook])).responses.create(
            model="m",
            input="Search.",
            tools=[tool],  # type: ignore[list-item]
        )
    assert refused.value.status_code == 400 and refused.value.code == "invalid_request"
    assert isinstance(refused.value.body, dict) and refused.value.body["type"] == "invalid_request_error"
    assert said in refused.value.message
    assert refused.value.param == said.split(" ")[0].rstrip(":")  # the field at fault, as OpenAI's API names it
    assert model.requests == []


async def responses_search(*tools: dict[str, Any]) -> list[str]:
    """The URLs of the web_search_call the openai SDK reads, for a search that finds a page on two hosts."""

    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> ToolResult:
        return search_result(query, [Source("http://allowed.com/", "A", "A."), Source("http://evil.com/", "E", "E.")])

    model = ScriptedModel(response(function_call("web_search", {"query": "q"})), response("Done."))
    hook = ServerTools([web_search], native={"web_search": "web_search"})
    answer = await openai_client(AgenticLoopMiddleware(model, hooks=[hook])).responses.create(
        model="m",
        input="Search.",
        tools=list(tools),  # type: ignore[arg-type]
    )
    (call,) = [item for item in answer.output if isinstance(item, ResponseFunctionWebSearch)]
    assert call.action.type == "search"
    return [source.url for source in call.action.sources or []]


async def test_a_blocked_domains_filter_in_openai_s_shape_holds() -> None:
    # OpenAI documents only `filters.allowed_domains`; OpenAI-compatible providers take `filters.blocked_domains`
    # too, and a client that sends it must not get evil.com's page (it was silently read as no filter)
    assert await responses_search({"type": "web_search", "filters": {"blocked_domains": ["evil.com"]}}) == [
        "http://allowed.com/"
    ]


@pytest.mark.parametrize("hosted", ["web_search_preview", "web_search"])
async def test_a_native_tool_declared_twice_is_refused_whichever_comes_first(hosted: str) -> None:
    # Only the first declaration's options were read: a bare one before the filtered one filtered nothing
    model, hook = searching("http://evil.com/")
    tools = [{"type": hosted}, {"type": "web_search", "filters": {"allowed_domains": ["allowed.com"]}}]
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client(AgenticLoopMiddleware(model, hooks=[hook])).responses.create(
            model="m",
            input="Search.",
            tools=tools,  # type: ignore[arg-type]
        )
    assert "tools[1] declares the native tool 'web_search' again" in refused.value.message
    assert refused.value.param == "tools[1]"
    assert model.requests == []


async def test_a_refused_request_is_logged_as_a_warning_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    # A client can send as many bad requests as it likes: each is its own doing, not a fault of the gateway
    model, hook = searching("http://allowed.com/")
    with caplog.at_level(logging.DEBUG), pytest.raises(anthropic.BadRequestError):
        await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook])).messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "Search."}],
            tools=[{"type": "web_search_20250305", "name": "web_search", "allowed_domains": "allowed.com"}],  # type: ignore[list-item]
        )
    said = [record for record in caplog.records if "allowed_domains must be a list" in record.getMessage()]
    assert [(record.levelno, record.exc_info) for record in said] == [(logging.WARNING, None)]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ("search", "web_search_options must be an object, got a string"),
        ({"allowed_domains": "allowed.com"}, "web_search_options.allowed_domains must be a list"),
    ],
)
async def test_malformed_web_search_options_are_refused_with_400_in_the_chat_shape(options: Any, said: str) -> None:
    model = ScriptedModel(chat_completion("Done."))
    _, hook = searching("http://allowed.com/")
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client(AgenticLoopMiddleware(model, hooks=[hook])).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Search."}],
            web_search_options=options,
        )
    assert refused.value.status_code == 400 and refused.value.code == "invalid_request"
    assert said in refused.value.message
    assert model.requests == []


async def test_well_formed_filters_still_reach_the_app_on_responses() -> None:
    model, hook = searching("http://allowed.com/")
    model.script = [response("Done.")]
    answer = await openai_client(AgenticLoopMiddleware(model, hooks=[hook])).responses.create(
        model="m",
        input="Search.",
        tools=[{"type": "web_search", "filters": {"allowed_domains": ["allowed.com"]}}],
    )
    assert answer.output_text == "Done."


def test_native_tools_without_the_url_parser_fail_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    _, hook = searching()
    monkeypatch.setitem(sys.modules, "ada_url", None)  # as if the `native` extra were not installed
    with pytest.raises(ConfigurationError, match=r"agentic-middleware\[native\]"):
        ServerTools(list(hook.by_name.values()), native={"web_search": "web_search"})
    ServerTools(list(hook.by_name.values()))  # a plain server tool needs no parser


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
OPTION_FIELDS = ["allowed_domains", "blocked_domains", "filters", "max_uses", "user_location", "name", "cache_control"]


@given(st.sampled_from(OPTION_FIELDS), JSON)
@settings(max_examples=200, deadline=None)
def test_any_json_in_any_option_of_the_declaration_gives_200_or_400(field: str, value: Any) -> None:
    model, hook = searching("http://allowed.com/")  # it searches, then answers
    app = AgenticLoopMiddleware(model, hooks=[hook])
    tool = {"type": "web_search_20250305", "name": "web_search", field: value}
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}], "tools": [tool]}

    async def post() -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
            return (await client.post("/v1/messages", content=orjson.dumps(body))).status_code

    assert asyncio.run(post()) in (200, 400)


async def test_a_plain_text_result_does_not_reach_the_model_past_a_filter() -> None:
    # A tool that returns text, not sources, gives the filters no URL to judge: its text went to the model as it was
    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> str:
        return "1. http://evil.com/secret: the secret is 42"

    model = ScriptedModel(message("Looking.", tool_use("web_search", {"query": "q"})), message("Done."))
    hook = ServerTools([web_search], native={"web_search": "web_search"})
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook])).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Search."}],
        tools=[{"type": "web_search_20250305", "name": "web_search", "blocked_domains": ["evil.com"]}],
    )
    (record,) = [block for block in reply.content if isinstance(block, WebSearchToolResultBlock)]
    assert not isinstance(record.content, list) and record.content.error_code == "unavailable"
    (read,) = model.requests[1].body["messages"][-1]["content"]
    assert read["is_error"] is True and "secret" not in read["content"]
