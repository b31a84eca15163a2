"""The words of tool records in a request's history that no other reader gives: the providers' server tools and
client tools whose calls and outputs a client sends back (and can forge), as a guardrail's texts.

On `/v1/messages`: an `mcp_tool_use`'s input, name and server; the results of code execution (`stdout`,
`stderr`, a file's `content`, a replace's `lines`, an error's code), of bash and of the text editor; a tool
search's references. On `/v1/responses`: a `file_search_call`'s queries and results (text, file name,
attributes), a `code_interpreter_call`'s code and logs, shell calls' commands and outputs, a `local_shell_call`'s
command and environment, `mcp_list_tools`, `mcp_approval_request` / `_response`, computer and patch calls.

Each is walked by `guardrail_walk.strings`: every string but its ids, so a field the API adds later is given too;
and every key, at any depth, but the APIs' own names of the records' fields (`RECORD_FIELDS`), so a word a client
writes only in a key it made up (`{"type": "code_execution_tool_result", ..., "<word>": 1}`) is judged as on a block
no reader knows, its mask written back as a rename.
What is left out is what no guardrail can read as words, only where the API puts it and while it is what the API
puts there: a compaction's `encrypted_content` (OpenAI's) while it is one token (`guardrail_values.fixed`), an image
generation's `result`, a computer call's screenshot and a code interpreter's image output's `url` while they hold
an image (a data URL, or base64 of an image's bytes). Other strings there are given, and so is an
`encrypted_stdout` anywhere but in a code execution result's `content` (where Anthropic puts it, given too: the
walk gives every string deeper than a record's own level).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .guardrail_opaque import MEDIA_PARTS, image_url_slots, media_slots
from .guardrail_values import HARMLESS
from .guardrail_walk import (
    Slot,
    image_slots,
    plain,
    read_fields,
    rest_slots,
    string_slot,
    strings,
    unreadable,
)

_NONE: frozenset[str] = frozenset()

# Messages blocks, each with the fields of it that are not given; a `*_tool_result` is a tool's result (left out
# with `skip_tool_message_in_guardrail`, as a `tool_result` is), a call is not.
MESSAGES_RECORDS: dict[str, frozenset[str]] = {
    "mcp_tool_use": _NONE,
    "code_execution_tool_result": _NONE,
    "bash_code_execution_tool_result": _NONE,
    "text_editor_code_execution_tool_result": _NONE,
    "tool_search_tool_result": _NONE,
    "container_upload": _NONE,
}

# Responses items, each with the fields of it that are not given. A `*_call_output` is a tool's output (left out
# with `skip_tool_message_in_guardrail`); the calls are not.
RESPONSES_RECORDS: dict[str, frozenset[str]] = {
    "file_search_call": _NONE,
    "code_interpreter_call": _NONE,
    "local_shell_call": _NONE,
    "shell_call": _NONE,
    "shell_call_output": _NONE,
    "apply_patch_call": _NONE,
    "computer_call": _NONE,
    "computer_call_output": _NONE,  # its `output` is a screenshot: _IMAGES
    "image_generation_call": _NONE,  # its `result` is the image, base64: _IMAGES
    "mcp_list_tools": _NONE,
    "mcp_approval_request": _NONE,
    "mcp_approval_response": _NONE,
    "compaction": _NONE,  # its `encrypted_content`, while one token, is left out as an id is (`fixed`)
    "item_reference": _NONE,
}

# The names the APIs give the fields of these records, at any depth (read from the installed anthropic and openai
# SDKs' types of them, params and output items): not given, being the API's words. Any other key is one a client
# made up, and given (`strings(named=...)`). A name missing here is only given needlessly.
RECORD_FIELDS = HARMLESS.union(
    (
        # Messages: MCP calls, code execution, bash and text editor results, tool search
        *("name", "server_name", "input", "content", "stdout", "stderr", "return_code", "error_code"),
        *("error_message", "encrypted_stdout", "file_type", "is_file_update", "lines", "num_lines", "start_line"),
        *("total_lines", "new_lines", "new_start", "old_lines", "old_start", "tool_name", "tool_references"),
        # Responses: file search, code interpreter, shells, patches, computer use, image generation, MCP
        *("queries", "results", "attributes", "filename", "score", "text", "code", "outputs", "logs", "url"),
        *("action", "actions", "command", "commands", "env", "timeout_ms", "user", "working_directory"),
        *("caller_id", "created_by", "description", "environment", "max_output_length", "path", "skills"),
        *("output", "outcome", "exit_code", "operation", "diff", "button", "keys", "message", "scroll_x"),
        *("scroll_y", "x", "y", "pending_safety_checks", "acknowledged_safety_checks", "image_url", "result"),
        *("background", "categories", "error", "input_tokens", "output_tokens", "reasoning_tokens", "total_tokens"),
        *("model", "moderation_details", "moderation_stage", "output_format", "param", "quality", "size"),
        *("revised_prompt", "svg_usage", "tools", "annotations", "input_schema", "server_label", "arguments"),
        *("approve", "reason", "encrypted_content"),
    )
)

# Responses items with a field the API fills with an image: given but for the strings that are images.
_IMAGES = {"computer_call_output": "output", "image_generation_call": "result"}


def messages_record_slots(block: dict[str, Any], skip_tool: bool) -> Iterator[Slot]:
    """A Messages record block's words (MESSAGES_RECORDS), a tool result's unless tool texts are skipped."""
    kind = block["type"]
    if skip_tool and kind.endswith("_tool_result"):
        return
    yield from strings(block, MESSAGES_RECORDS[kind], named=RECORD_FIELDS)


def responses_record_slots(item: dict[str, Any]) -> Iterator[Slot]:
    """A Responses record item's words (RESPONSES_RECORDS); a code interpreter's image outputs are images."""
    kind = item["type"]
    if kind == "code_interpreter_call":
        yield from string_slot(item, "code")
        outputs = item.get("outputs")
        if outputs is not None and not isinstance(outputs, list):
            raise unreadable(f"code_interpreter_call outputs that are {type(outputs).__name__}")
        for output in outputs or ():
            if not isinstance(output, dict):
                raise unreadable(f"a code_interpreter_call output that is {type(output).__name__}")
            if output.get("type") != "image":
                yield from strings(output, named=RECORD_FIELDS)
                continue
            # an image's `url` is left out while it is an image (a URL of words is given); the rest of it is given
            yield from strings(output, _IMAGE_URL, named=RECORD_FIELDS)
            yield from image_url_slots(output, "url")
        if not plain(item, _CODE_READ):
            yield from rest_slots(item, _CODE_READ)
        return
    screenshot = item.get("output") if kind == "computer_call_output" else None
    if isinstance(screenshot, list):  # parts, as LiteLLM reads a tool's output: media no reader here reads
        raise unreadable("a computer_call_output whose output is a list")
    if isinstance(screenshot, dict):  # a part, read as LiteLLM reads a tool's: a screenshot is an image part
        shown = screenshot.get("type")
        if shown not in (None, "computer_screenshot") and not (isinstance(shown, str) and shown in MEDIA_PARTS):
            raise unreadable(f"a computer_call_output whose output is {shown}")
        yield from strings(item, RESPONSES_RECORDS[kind] | {"output"}, named=RECORD_FIELDS)
        yield from media_slots(screenshot, "computer_screenshot" if shown is None else shown)
        return
    image = _IMAGES.get(kind)
    if image is None:
        yield from strings(item, RESPONSES_RECORDS[kind], named=RECORD_FIELDS)
        return
    yield from strings(item, RESPONSES_RECORDS[kind] | {image}, named=RECORD_FIELDS)
    yield from image_slots(item, image, RECORD_FIELDS)


_IMAGE_URL = frozenset(("url",))
_MCP_CALL_READ = read_fields("name", "arguments", "output", "error")
_CODE_READ = read_fields("code", "outputs")


def mcp_call_slots(item: dict[str, Any], skip_tool: bool) -> Iterator[Slot]:
    """An `mcp_call`'s output and error, which the model reads, unless tool texts are skipped (its name and
    arguments are among the `tool_calls`); and its other fields, its server's label, as the call's words."""
    if not skip_tool:
        yield from string_slot(item, "output")
        error = item.get("error")
        if isinstance(error, str):
            yield item, "error"
        elif error is not None:
            yield from strings(error, named=RECORD_FIELDS)
    if not plain(item, _MCP_CALL_READ):
        yield from rest_slots(item, _MCP_CALL_READ)
