"""`python -m examples.gateway [--port 8000] [--config FILE] [--workers N]` serves the gateway on 127.0.0.1;
`--demo` starts it on a free port, asks one question on each route with the official SDKs, prints the answers,
and exits.

With AGENTIC_UPSTREAM=http://host/v1 the gateway forwards to that model server instead of the demo model
(`--demo` always uses the demo model, in one process, whatever AGENTIC_UPSTREAM and `--workers` say: it needs no
keys and no network).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import uvicorn

from agentic_middleware import load_config

from .app import CONFIG, CONFIG_VARIABLE, UPSTREAM_VARIABLE, create_app
from .demo_model import DemoModel
from .serve import serving
from .upstream import Upstream


async def demo(config: str) -> None:
    import anthropic  # here, not at the top: serving the gateway needs neither SDK (start-up time, memory)
    import openai

    model = DemoModel()
    async with serving(create_app(config, model)) as url:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.gateway", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--config", default=str(CONFIG), help="YAML config (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default: %(default)s)")
    parser.add_argument("--demo", action="store_true", help="run one request with each SDK, print them, exit")
    parser.add_argument("--no-access-log", action="store_true", help="do not log every request")
    args = parser.parse_args(argv)
    if args.demo:
        asyncio.run(demo(args.config))
        return 0
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    load_config(args.config)  # a mistake in the config stops the start here, once, with its own message
    os.environ[CONFIG_VARIABLE] = args.config  # what each worker's `app_from_env` reads
    upstream = os.environ.get(UPSTREAM_VARIABLE)
    try:  # a bad upstream likewise stops the start here, once, before uvicorn starts (and restarts) workers
        if upstream:
            Upstream(upstream)
    except ValueError as error:
        print(f"{parser.prog}: error: {UPSTREAM_VARIABLE}: {error}", file=sys.stderr)
        return 1
    behind = f"upstream {upstream}" if upstream else f"the demo model ({UPSTREAM_VARIABLE} unset)"
    workers = f", {args.workers} workers" if args.workers > 1 else ""
    print(f"gateway on http://{args.host}:{args.port}{workers} in front of {behind}", flush=True)
    uvicorn.run(
        "examples.gateway.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        access_log=not args.no_access_log,
        ws="none",  # the gateway serves no websockets: not importing a websocket library shortens the start
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
