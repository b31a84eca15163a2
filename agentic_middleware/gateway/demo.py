"""`agentic-gateway --demo`: the gateway in front of the scripted demo model, one question per route asked with the
official SDKs, the answers printed. No keys, no network: the model is `DemoModel`, the tools are demo.yaml's (the
built-in compression and web search over the bundled corpus, and the demo's MCP server over stdio).
"""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from types import ModuleType

from .app import create_app
from .demo_model import DemoModel
from .serve import serving


def _sdks() -> tuple[ModuleType, ModuleType]:
    try:  # here, not at the top: serving the gateway needs neither SDK (start-up time, memory)
        return importlib.import_module("anthropic"), importlib.import_module("openai")
    except ImportError as error:
        raise SystemExit(
            f"--demo asks with the official SDKs: pip install 'agentic-middleware[gateway,demo]' ({error})"
        ) from None


async def demo(config: str | Path) -> None:
    """The demo. Where its start-up goes (measured on the 2-core CI machine): importing the two SDKs about 1.5 s,
    the gateway's app 0.5 s (the mcp SDK), its start 1 to 1.5 s (the MCP server's process imports the SDK too); so
    the first line comes at once, and the SDKs are imported in a thread while the gateway starts."""
    print("Starting the gateway in front of the scripted demo model (no keys, no network)...", flush=True)
    sdks = asyncio.ensure_future(asyncio.to_thread(_sdks))
    model = DemoModel()
    async with serving(create_app(config, model)) as url:
        anthropic, openai = await sdks
        print(f"Gateway on {url}: the scripted demo model behind the middleware, hooks from {config}\n")

        question = "What is the capital of Australia?"
        async with anthropic.AsyncAnthropic(base_url=url, api_key="demo", max_retries=0) as claude:
            reply = await claude.messages.create(
                model="demo",
                max_tokens=512,
                messages=[{"role": "user", "content": question}],
                tools=[{"type": "web_search_20250305", "name": "web_search"}],
            )
        print("anthropic SDK, POST /v1/messages, with Anthropic's native web_search tool:")
        print(f"  Q: {question}")
        for block in reply.content:  # Anthropic's own record of the search, as its API gives it
            if block.type == "server_tool_use":
                print(f"  [server_tool_use {block.name} {block.input}]")
            elif block.type == "web_search_tool_result" and isinstance(block.content, list):
                print(f"  [web_search_tool_result: {', '.join(result.url for result in block.content)}]")
            elif block.type == "text":
                cited = ", ".join(c.url for c in block.citations or [] if c.type == "web_search_result_location")
                print(f"  A: {block.text}" + (f"  [cites {cited}]" if cited else ""))
        searches = reply.usage.server_tool_use.web_search_requests if reply.usage.server_tool_use else 0
        print(f"  (stop_reason={reply.stop_reason}, usage.server_tool_use.web_search_requests={searches})\n")

        question = "How tall is Mount Everest?"
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0) as gpt:
            completion = await gpt.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": question}]
            )
        choice = completion.choices[0]
        print("openai SDK, POST /v1/chat/completions, no tools declared (the gateway adds web_search):")
        print(f"  Q: {question}\n  A: {choice.message.content}  (finish_reason={choice.finish_reason})\n")

        question = "Who created Git?"
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0) as gpt:
            answer = await gpt.responses.create(model="demo", input=question, tools=[{"type": "web_search"}])
        print("openai SDK, POST /v1/responses, with OpenAI's native web_search tool:")
        print(f"  Q: {question}")
        for item in answer.output:  # OpenAI's own record of the search, then the message with its citations
            if item.type == "web_search_call" and item.action.type == "search":
                print(f"  [web_search_call {item.status}: search {item.action.query!r}]")
            elif item.type == "message":
                for part in item.content:
                    if part.type == "output_text":
                        cited = ", ".join(a.url for a in part.annotations if a.type == "url_citation")
                        print(f"  A: {part.text}" + (f"  [cites {cited}]" if cited else ""))
        print(f"  (status={answer.status})\n")

        question = "What time is it in Tokyo?"
        async with anthropic.AsyncAnthropic(base_url=url, api_key="demo", max_retries=0) as claude:
            reply = await claude.messages.create(
                model="demo", max_tokens=512, messages=[{"role": "user", "content": question}]
            )
        text = "".join(block.text for block in reply.content if block.type == "text")
        if not text.startswith("It is "):
            raise SystemExit(f"the example MCP server did not answer (see the warnings above): {text}")
        print("anthropic SDK, POST /v1/messages, answered with local_time from the example MCP server (stdio):")
        print(f"  Q: {question}\n  A: {text}  (stop_reason={reply.stop_reason})\n")

        print(f"The model was called {model.calls} times for these 4 requests: each tool ran inside the gateway.")
