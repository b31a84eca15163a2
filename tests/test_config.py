"""Hooks by dotted path and settings from YAML (LiteLLM's `litellm_settings.callbacks` included), failing loudly."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import http_client
from support import Route, ToolHook, post

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, Settings, load_config
from agentic_middleware.testing import ScriptedModel

HOOK_MODULE = """
from support import ToolHook

class MyToolCallback(ToolHook):
    pass

my_tool_callback = MyToolCallback("lookup")
not_a_hook = 42
"""


@pytest.fixture
def module(tmp_path: Path) -> str:
    """A fresh hook module in its own folder (not on sys.path); its name is unique to the test."""
    name = f"hooks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(HOOK_MODULE)
    return name


def write_config(folder: Path, text: str) -> Path:
    path = folder / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


MESSAGES = Route("messages")


async def served_calls(app: AgenticLoopMiddleware, route: Route = MESSAGES) -> int:
    """How many model calls one looping request makes through `app`: the first, the reruns, the closing call."""
    assert isinstance(app.app, ScriptedModel)
    async with http_client(app) as client:
        await post(client, route, route.request())
    return len(app.app.requests)


def looping_model(route: Route = MESSAGES) -> ScriptedModel:
    return ScriptedModel(*(route.calls(("lookup", {"n": n})) for n in range(10)))


async def test_a_dotted_path_in_code_names_a_hook_instance(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    app = AgenticLoopMiddleware(looping_model(), hooks=[f"{module}.my_tool_callback"])
    assert type(app.settings.hooks[0]).__name__ == "MyToolCallback"
    assert await served_calls(app) == 5


async def test_a_litellm_proxy_config_works_as_it_stands(module: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""
        model_list:
          - model_name: claude
            litellm_params: {{model: anthropic/claude, api_key: os.environ/UNSET_AND_UNREAD}}
        litellm_settings:
          callbacks: ["{module}.my_tool_callback"]
        """,
    )
    app = AgenticLoopMiddleware(looping_model(), config=config)
    assert await served_calls(app) == 5
    assert module not in [p.rpartition("/")[2] for p in sys.path]  # the folder was only searched during import


async def test_our_section_holds_every_option_and_reads_the_environment(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_LOOPS", "2")
    monkeypatch.setenv("HOOK_PATH", f"{module}.my_tool_callback")
    config = write_config(
        tmp_path,
        """
        agentic_middleware:
          hooks: [os.environ/HOOK_PATH]
          max_agentic_loops: os.environ/AGENTIC_LOOPS
          routes: {/llm/v1/chat/completions: chat_completions}
          custom_llm_provider: {chat_completions: hosted_vllm}
        """,
    )
    settings = load_config(config)
    assert settings.max_agentic_loops == 2
    assert settings.routes == {"/llm/v1/chat/completions": "chat_completions"}
    assert settings.custom_llm_provider == {"chat_completions": "hosted_vllm"}
    assert type(settings.hooks[0]).__name__ == "MyToolCallback"

    chat = Route("chat")
    chat.path = "/llm/v1/chat/completions"
    app = AgenticLoopMiddleware(looping_model(chat), config=settings)
    assert await served_calls(app, chat) == 4


async def test_options_in_code_win_and_hooks_in_code_replace_the_files_callbacks(module: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f"""
        litellm_settings: {{callbacks: ["{module}.my_tool_callback"]}}
        agentic_middleware: {{max_agentic_loops: 5}}
        """,
    )
    app = AgenticLoopMiddleware(looping_model(), config=config, max_agentic_loops=1)
    assert await served_calls(app) == 3

    replacement = ToolHook("other")
    app = AgenticLoopMiddleware(looping_model(), config=config, hooks=[replacement])
    assert app.settings.hooks == (replacement,)
    assert await served_calls(app) == 1


def test_litellm_built_in_callbacks_are_ignored_with_a_warning(
    module: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = write_config(tmp_path, f'litellm_settings: {{callbacks: ["langfuse", "{module}.my_tool_callback"]}}')
    assert len(load_config(config).hooks) == 1
    assert "'langfuse' is a LiteLLM built-in callback" in caplog.text


def test_a_class_path_in_code_fails_and_shows_the_fix(module: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as error:
        AgenticLoopMiddleware(ScriptedModel(), hooks=[f"{module}.MyToolCallback"])
    message = str(error.value)
    assert f"hooks entry '{module}.MyToolCallback' resolved to a class" in message
    assert "`my_tool_callback = MyToolCallback()`" in message
    assert f"{module}.my_tool_callback" in message


def test_a_class_path_in_yaml_fails_and_names_the_file(module: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, f'litellm_settings: {{callbacks: ["{module}.MyToolCallback"]}}')
    with pytest.raises(ConfigurationError, match=r"resolved to a class") as error:
        AgenticLoopMiddleware(ScriptedModel(), config=config)
    assert str(config) in str(error.value) and "litellm_settings.callbacks" in str(error.value)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("no_such_module_xyz.hook", "no module named 'no_such_module_xyz'"),
        ("{module}.missing", "has no 'missing'"),
        ("{module}.not_a_hook", "42 is not a hook"),
    ],
)
def test_paths_that_name_no_hook_fail_at_start(module: str, tmp_path: Path, entry: str, match: str) -> None:
    config = write_config(tmp_path, f'litellm_settings: {{callbacks: ["{entry.format(module=module)}"]}}')
    with pytest.raises(ConfigurationError, match=match):
        load_config(config)


def test_an_import_error_inside_the_module_is_reported_as_such(tmp_path: Path) -> None:
    (tmp_path / "broken_hooks_mod.py").write_text("import a_dependency_that_is_missing\n")
    config = write_config(tmp_path, 'litellm_settings: {callbacks: ["broken_hooks_mod.hook"]}')
    with pytest.raises(ConfigurationError, match=r"importing 'broken_hooks_mod' failed.*a_dependency_that_is_missing"):
        load_config(config)


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ("{max_loops: 3}", "unknown option 'max_loops' in agentic_middleware"),
        ("{max_agentic_loops: many}", "agentic_middleware.max_agentic_loops must be an integer"),
        ("{routes: [a, b]}", "routes must map a path"),
        ("{custom_llm_provider: 7}", "custom_llm_provider must be a string"),
        ("{max_agentic_loops: os.environ/UNSET_LOOPS_VARIABLE}", "UNSET_LOOPS_VARIABLE, which is not set"),
        ("[1, 2]", "agentic_middleware must be a mapping"),
    ],
)
def test_mistakes_in_our_section_name_the_option_and_the_file(tmp_path: Path, section: str, match: str) -> None:
    config = write_config(tmp_path, f"agentic_middleware: {section}\n")
    with pytest.raises(ConfigurationError, match=match) as error:
        load_config(config)
    assert str(config) in str(error.value)


def test_a_yaml_config_without_pyyaml_says_how_to_install_it(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    config = write_config(tmp_path, "agentic_middleware: {}\n")
    with pytest.raises(ConfigurationError, match=r"needs PyYAML: pip install 'agentic-middleware\[yaml\]'"):
        AgenticLoopMiddleware(ScriptedModel(), config=config)


def test_settings_from_load_config_are_what_the_middleware_uses(tmp_path: Path) -> None:
    config = write_config(tmp_path, "agentic_middleware: {max_agentic_loops: 7}\n")
    settings = load_config(config)
    assert isinstance(settings, Settings)
    assert AgenticLoopMiddleware(ScriptedModel(), config=settings).settings == settings


def test_a_timeout_that_is_not_a_finite_positive_number_fails_at_start(tmp_path: Path) -> None:
    config = write_config(tmp_path, "agentic_middleware: {app_timeout: .nan}\n")
    with pytest.raises(ConfigurationError, match="app_timeout must be a number of seconds above 0"):
        load_config(config)


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"Content-Length": "5"}, "Content-Length"),
        ({"transfer-encoding": "chunked"}, "transfer-encoding"),
        ({"host": "elsewhere"}, "host"),
        ({"x-request-id": "agentic-{call_idd}"}, "{call_idd}"),
        ({"x-tags": "{tag}-{call_id}"}, "{tag}"),
    ],
)
def test_internal_headers_refuse_per_call_headers_and_unknown_placeholders(headers: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match="internal_headers") as caught:
        AgenticLoopMiddleware(ScriptedModel(), hooks=[], internal_headers=headers)
    assert named in str(caught.value)


def test_internal_headers_keep_json_values_with_the_call_id() -> None:
    headers = {"x-litellm-spend-logs-metadata": '{"agentic_call_id": "{call_id}"}'}
    AgenticLoopMiddleware(ScriptedModel(), hooks=[], internal_headers=headers)
