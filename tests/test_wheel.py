"""The package as a user gets it: the wheel built from this checkout, installed with `[gateway]` into a fresh virtual
environment outside the repository, `agentic-gateway --upstream` in front of a scripted model server under uvicorn,
driven on all three routes by the official SDKs.

Needs (marker `wheel`): hatchling in this environment (the test group has it; the wheel is built without build
isolation, so no download for the build), and a package index or pip's cache for the gateway's dependencies
(starlette, orjson, aiohttp, uvicorn, pyyaml, prometheus-client and theirs). About 20-40 s, most of it pip; the
virtual environment is made without pip (`--without-pip`) and this environment's pip installs into it.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from agentic_middleware import __version__
from agentic_middleware.gateway import DemoModel, model_app, serving

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.wheel

CONFIG = """\
agentic_middleware:
  builtin_tools:
    web_search: {backend: corpus}
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder)]
    subprocess.run([*argv, str(ROOT)], check=True, timeout=120, capture_output=True)
    (built,) = folder.glob("agentic_middleware-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding only the wheel and what `[gateway]` brings."""
    home = tmp_path_factory.mktemp("venv")
    assert not home.resolve().is_relative_to(ROOT.resolve())
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True, timeout=60)
    python = home / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", f"{wheel}[gateway]"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return home


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH: the fresh environment imports the installed wheel, never this checkout."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), **extra}


def test_the_wheel_holds_the_license_the_version_and_the_console_script(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"agentic_middleware-{__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "agentic_middleware/gateway/demo.yaml" in names and "agentic_middleware/websearch/corpus.json" in names
    assert not [name for name in names if name.startswith(("examples/", "tests/", "benchmarks/"))]
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert f"Version: {__version__}" in metadata and "License-Expression: MIT" in metadata
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.MULTILINE))
    assert extras == {
        "yaml",
        "otel",
        "mcp",
        "pydantic",
        "native",
        "redis",
        "gateway",
        "demo",
    }  # no test or bench extra published
    requirements = " ".join(line.split(";")[0] for line in re.findall(r"^Requires-Dist: (.+)$", metadata, re.MULTILINE))
    assert "litellm" not in requirements and "pytest" not in requirements and "==" not in requirements
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "agentic-gateway = agentic_middleware.gateway.cli:run" in entry_points
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dynamic"] == ["version"]


def test_an_optional_module_without_its_extra_names_the_extra(venv: Path) -> None:
    script = "import agentic_middleware.mcp"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install 'agentic-middleware[mcp]'" in done.stderr, done.stderr


async def test_the_installed_gateway_serves_all_three_routes_with_a_tool_from_the_yaml(
    venv: Path, tmp_path: Path
) -> None:
    command = str(venv / "bin" / "agentic-gateway")
    config = tmp_path / "tools.yaml"
    config.write_text(CONFIG)
    model = DemoModel()  # the scripted model server: calls web_search when it is declared, then answers from it
    async with serving(model_app(model)) as upstream:
        log = tmp_path / "gateway.log"
        argv = [command, "--upstream", f"{upstream}/v1", "--config", str(config), "--port", "0", "--no-access-log"]
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            url = await _started(process, log)
            async with anthropic.AsyncAnthropic(base_url=url, api_key="client-key", max_retries=0) as claude:
                reply = await claude.messages.create(
                    model="demo", max_tokens=200, messages=[{"role": "user", "content": "Who created Git?"}]
                )
            assert [block.type for block in reply.content] == ["text"]  # the server tool ran unseen
            assert reply.content[0].text.startswith('According to "Git"')  # type: ignore[union-attr]
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0) as gpt:
                chat = await gpt.chat.completions.create(
                    model="demo", messages=[{"role": "user", "content": "How tall is Mount Everest?"}]
                )
                answer = await gpt.responses.create(model="demo", input="What is the capital of Australia?")
            assert chat.choices[0].message.tool_calls is None
            assert (chat.choices[0].message.content or "").startswith('According to "Mount Everest"')
            assert [item.type for item in answer.output] == ["message"]
            assert answer.output_text.startswith('According to "Canberra"')
            assert model.calls == 6  # two model calls per request: the tool call, then the answer
            async with httpx.AsyncClient(base_url=url) as client:
                health = await client.get("/health")
                metrics = (await client.get("/metrics")).text
        finally:
            process.terminate()
            process.wait(20)
    assert health.json() == {"status": "ok"}
    for route in ("messages", "chat_completions", "responses"):
        line = f'agentic_tool_calls_total{{outcome="rerun",route="{route}",tool="web_search"}} 1.0'
        assert line in metrics, metrics
        assert f'agentic_requests_total{{ended_by="finished",route="{route}"}} 1.0' in metrics
    assert "Traceback" not in log.read_text()


async def _started(process: subprocess.Popen[bytes], log: Path) -> str:
    """The gateway's URL once uvicorn says it runs (it listens on a free port, `--port 0`)."""
    deadline = time.monotonic() + 30
    while not (found := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text())):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.05)
    return found[1]
