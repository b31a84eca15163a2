"""Where the texts of a request stand, route by route: the slots a guardrail's `texts` are read from and written to.

LiteLLM's proxy reads a part's `text` and little else; the model reads more, so each block, part and item type
the routes know is read here for every word the model reads of it, in LiteLLM's order where LiteLLM reads it
(guardrail_inputs.py says what, per route), and the tool records of the history by guardrail_native.py (web
search) and guardrail_records.py (the other server and client tools).

Fail closed: a block, part or item whose type none of them knows is given whole (every key and string in it but
its ids: guardrail_walk.unknown_slots), not passed on unread; a text of a shape no guardrail can read
(a content that is an object, a part that is a string, a `text` that is not a string) refuses the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .guardrail_native import block_slots, citation_slots, web_search_call_slots
from .guardrail_opaque import (
    DOCUMENT_READ,
    DOCUMENT_SOURCES,
    MEDIA_PARTS,
    audio_slots,
    chat_call_slots,
    media_slots,
    opaque_slots,
)
from .guardrail_records import (
    MESSAGES_RECORDS,
    RESPONSES_RECORDS,
    mcp_call_slots,
    messages_record_slots,
    responses_record_slots,
)
from .guardrail_values import is_token, never
from .guardrail_walk import (
    API_FIELDS,
    Slot,
    plain,
    read_fields,
    rest_slots,
    string_slot,
    strings,
    unknown_slots,
    unreadable,
)

# Parts whose words are a `text` (or a refusal's `refusal`), on any route.
_TEXT_PARTS = frozenset(("text", "input_text", "output_text", "summary_text", "reasoning_text", "refusal"))
# Thinking parts, by the field that holds their thinking: left out only where the provider signs it
# (`_thinking_slots`). Images, audio and files are read by guardrail_opaque.py: their bytes are no words.
_THINKING = {"thinking": "thinking", "redacted_thinking": "data"}
# Messages blocks read by guardrail_native.py.
_NATIVE_BLOCKS = frozenset(("server_tool_use", "web_search_tool_result"))
# Responses items that are tool outputs of text (a string, or parts): read as a message's content is.
_OUTPUTS = frozenset(
    ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "apply_patch_call_output")
)
# Responses items that are a tool's output: left out with `skip_tool_message_in_guardrail`, as LiteLLM leaves out
# tool messages (the ones of other types, records walked by guardrail_records.py, are read there).
TOOL_OUTPUTS = _OUTPUTS | frozenset(("shell_call_output", "computer_call_output"))
# Responses calls whose words are among the `tool_calls` (guardrail_calls.py), not the texts.
_CALLS = frozenset(("function_call", "custom_tool_call"))
# A document's sources that hold no text: bytes, a URL the provider fetches, a file's id (its URL is given).
_OPAQUE_SOURCES = frozenset(("base64", "url", "file"))

# What a reader reads of each known message, block, part or item, or leaves out on purpose: the rest of its fields
# are walked (rest_slots), so that words a client puts in a field no reader names are judged all the same. Read
# apart: LiteLLM's `thinking_blocks` (`_thinking_slots`). Left out on purpose: ids and fixed words
# (guardrail_values.HARMLESS) everywhere, and bytes, media types and indexes (guardrail_opaque.py), while they hold
# what the API puts there.
_MESSAGE_READ = {
    "anthropic_messages": read_fields("role", "content"),
    "chat_completions": read_fields(
        "role", "content", "refusal", "tool_calls", "function_call", "audio", "thinking_blocks", "images"
    ),
    "responses": read_fields("role", "content"),
}
# The APIs' names of an annotation's fields (a file citation's `index` besides the names of other fields): any
# other key in an annotation is one a client made up, and given.
_ANNOTATION_FIELDS = API_FIELDS.union(("index",))
_TEXT_READ = read_fields("text", "refusal", "citations", "annotations")
_CONTENT_READ = read_fields("content")
_CALL_READ = read_fields("name", "input", "arguments")
_FETCHED_READ = read_fields("url", "retrieved_at", "error_code", "content")
_DOCUMENT_READ = read_fields("title", "context", "source")
_SEARCH_RESULT_READ = read_fields("title", "source", "content")
_REASONING_READ = read_fields("summary", "content", "encrypted_content")
_OUTPUT_READ = read_fields("output")
_THINKING_READ = {kind: read_fields(field) for kind, field in _THINKING.items()}
# A structured output's schema object and Chat's `response_format` around it (`strict`, a boolean, is an API field).


def _kind(holder: dict[str, Any]) -> str | None:
    """A block's, part's or item's type: a string, or none; any other value is refused (no reader can say what it
    is, and a list of words would pass unjudged as a type)."""
    kind = holder.get("type")
    if kind is None or isinstance(kind, str):
        return kind
    raise unreadable(f"a type that is {type(kind).__name__}")


def role(item: Any, api_surface: str) -> str:
    """A message's role as LiteLLM scopes it: a Responses tool output counts as "tool".

    Only what can be a tool's output counts as one, so the skip settings leave nothing else out unjudged: on
    Responses the output items of the tools the routes know (`TOOL_OUTPUTS`; a made-up `x_call_output` is an item
    no reader knows, judged whatever the settings), and a message has a role but not "tool", which only Chat has
    (a Messages or Responses message claiming it is judged); any other item claiming a role (a `web_search_call`
    with `"role": "system"`) has none."""
    if not isinstance(item, dict):
        return ""
    if api_surface == "responses":
        kind = item.get("type")
        if isinstance(kind, str) and kind in TOOL_OUTPUTS:
            return "tool"
        if kind not in (None, "message"):
            return ""
    value = item.get("role")
    said = value.lower() if isinstance(value, str) else ""
    return "" if said == "tool" and api_surface != "chat_completions" else said


def slots(data: dict[str, Any], api_surface: str, skip_system: bool, skip_tool: bool) -> Iterator[Slot]:
    """Every text of the request a guardrail is given, in order, each as its slot."""
    if api_surface == "responses":
        yield from _responses_slots(data, skip_system, skip_tool)
        return
    if api_surface == "anthropic_messages" and not skip_system:
        yield from _content_slots(data, "system")
    messages = data.get("messages")
    read = _MESSAGE_READ[api_surface]
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            raise unreadable(f"a message that is {type(message).__name__}")
        said = role(message, api_surface)
        skipped = (skip_system and said == "system") or (skip_tool and said == "tool")
        if skipped and api_surface != "anthropic_messages":  # there tool results are blocks, system is top-level
            continue
        if api_surface == "chat_completions":  # an assistant's refusal, as the model reads it (LiteLLM gives none)
            yield from string_slot(message, "refusal")
        content = message.get("content")
        if not isinstance(content, list):
            yield from _content_slots(message, "content")
        else:
            for block in content:
                if not isinstance(block, dict):
                    raise unreadable(f"a part of content that is {type(block).__name__}")
                if api_surface == "anthropic_messages":
                    yield from _block_slots(block, skip_tool, message.get("role") == "assistant")
                else:
                    yield from part_slots(block)
        if api_surface == "chat_completions":  # what `tool_calls` does not give of a call; an audio's transcript
            yield from chat_call_slots(message)
            yield from audio_slots(message)
            yield from _thinking_blocks_slots(message)
            yield from _generated_images(message)
        if not plain(message, read):
            yield from rest_slots(message, read)  # a `name`, a role no API has


def _block_slots(block: dict[str, Any], skip_tool: bool, assistant: bool) -> Iterator[Slot]:
    """A Messages content block's texts: a tool's result unless tool texts are skipped, a record's words, a part's;
    a thinking block's unless signed in an `assistant` turn (`_thinking_slots`)."""
    kind = _kind(block)
    if kind in ("tool_result", "mcp_tool_result", "web_fetch_tool_result"):
        if skip_tool:
            return
        if kind == "web_fetch_tool_result":
            yield from _web_fetch_slots(block)
        else:
            yield from _content_slots(block, "content")
        if not plain(block, _CONTENT_READ):  # a tool_result's `is_error` that is not a boolean, say
            yield from rest_slots(block, _CONTENT_READ)
    elif kind == "tool_use":  # its name and input are among the `tool_calls` (guardrail_calls.py)
        if not plain(block, _CALL_READ):
            yield from rest_slots(block, _CALL_READ)
    elif kind in _NATIVE_BLOCKS:
        yield from block_slots(block, skip_tool)  # a native record's words (guardrail_native.py)
    elif isinstance(kind, str) and kind in MESSAGES_RECORDS:
        yield from messages_record_slots(block, skip_tool)
    elif isinstance(kind, str) and kind in _THINKING:
        yield from _thinking_slots(block, assistant)
    else:
        yield from part_slots(block)


def _generated_images(message: dict[str, Any]) -> Iterator[Slot]:
    """A Chat message's `images` (LiteLLM's generated images): each read as an `image_url` part, whatever type it
    names, as LiteLLM reads its `image_url` regardless; anything but a list of objects is refused."""
    images = message.get("images")
    if images is None:
        return
    if not isinstance(images, list) or not all(isinstance(image, dict) for image in images):
        raise unreadable("images that are not a list of objects")
    for image in images:
        yield from media_slots(image, "image_url")


def _thinking_blocks_slots(message: dict[str, Any]) -> Iterator[Slot]:
    """LiteLLM's `thinking_blocks` on a Chat message (Anthropic's thinking blocks, which it sends back to the
    provider in an assistant turn): each read as a Messages thinking block is; a block of another type is given
    whole, and a `thinking_blocks` that is not a list of objects is given or refused as any other field would be."""
    blocks = message.get("thinking_blocks")
    if blocks is None:
        return
    if not isinstance(blocks, list):
        yield from opaque_slots(message, {"thinking_blocks": never})
        return
    for block in blocks:
        if not isinstance(block, dict):
            raise unreadable(f"a thinking block that is {type(block).__name__}")
        kind = _kind(block)
        if isinstance(kind, str) and kind in _THINKING:
            yield from _thinking_slots(block, message.get("role") == "assistant")
        else:
            yield from unknown_slots(block)


def _thinking_slots(part: dict[str, Any], assistant: bool) -> Iterator[Slot]:
    """A `thinking` or `redacted_thinking` part's words. A `thinking` block's text is given wherever it stands,
    signed or not: a signature is no proof here (none can check it but the provider that made it), and LiteLLM
    replays a signed block unchecked to providers that read it as the model's own reasoning (Mistral's thinking,
    Gemini's thought parts), so a forged one would reach them unjudged. A signed block a guardrail masks in an
    assistant turn is left out of it (guardrail_inputs `_drop_blocks`): Anthropic refuses one altered. A
    `redacted_thinking` block's `data`, encrypted by the provider, is left out in an `assistant` turn while it is one
    token; anywhere
    else, or when it is not one token, it is given. Fields made up on the part, or a signature that is no token,
    are given as on any known part (`rest_slots`)."""
    field = _THINKING[part["type"]]
    value = part.get(field)
    encrypted = field == "data" and assistant and isinstance(value, str) and value != "" and is_token(value)
    if not encrypted:
        yield from string_slot(part, field)
    read = _THINKING_READ[part["type"]]
    if not plain(part, read):
        yield from rest_slots(part, read)


def _web_fetch_slots(block: dict[str, Any]) -> Iterator[Slot]:
    """A `web_fetch_tool_result`'s words: the page's URL and the fetched document (title, context, text), or an
    error's code; a content of another type is given whole."""
    content = block.get("content")
    if not isinstance(content, dict):
        if content is not None:
            raise unreadable(f"a web_fetch_tool_result content that is {type(content).__name__}")
        return
    if _kind(content) not in ("web_fetch_result", "web_fetch_tool_result_error"):
        yield from unknown_slots(content)
        return
    for key in ("url", "retrieved_at", "error_code"):
        yield from string_slot(content, key)
    if not plain(content, _FETCHED_READ):
        yield from rest_slots(content, _FETCHED_READ)
    document = content.get("content")
    if isinstance(document, dict):
        yield from part_slots(document)
    elif document is not None:
        raise unreadable(f"a web_fetch_result content that is {type(document).__name__}")


def _content_slots(holder: dict[str, Any], key: str) -> Iterator[Slot]:
    """A content field's texts: the field itself when a string, else its parts' texts.

    A field or part of a shape no guardrail can read (a content that is an object, a part that is a string, a
    `text` that is not a string) is refused, not passed on unjudged: a lenient app might read it."""
    value = holder.get(key)
    if isinstance(value, str):
        yield holder, key
    elif isinstance(value, list):
        for part in value:
            if not isinstance(part, dict):
                raise unreadable(f"a part of {key} that is {type(part).__name__}")
            yield from part_slots(part)
    elif value is not None:
        raise unreadable(f"{key} that is {type(value).__name__}")


def part_slots(part: dict[str, Any]) -> Iterator[Slot]:
    """A content part's texts: its `text`, and the texts the model reads in parts that keep them elsewhere.

    LiteLLM's proxy gives a guardrail only a part's `text` (and a Responses refusal's `refusal`); the model also
    reads a refusal part's words, a `document`'s title, context and text source (`data`, or a `content` source's
    texts), a `search_result`'s title, source and text blocks and a Responses text's `annotations`, so those are
    given too: else a word a guardrail blocks would reach the model in a document. An image, audio or file part is
    walked but for its bytes, URL and settings while they are what the API puts there (guardrail_opaque.py). A
    nested `tool_result` (which no API accepts) is read as one; a part of a type no reader knows is given whole."""
    kind = _kind(part)
    if kind in _TEXT_PARTS:
        yield from string_slot(part, "refusal" if kind == "refusal" else "text")
        yield from citation_slots(part)
        annotations = part.get("annotations")  # a Responses text's citations: a title, a URL, a file name
        if annotations is not None and not isinstance(annotations, list):
            raise unreadable(f"annotations that are {type(annotations).__name__}")
        yield from strings(annotations, named=_ANNOTATION_FIELDS)
        if not plain(part, _TEXT_READ):  # a Responses text's `logprobs` tokens, fields made up
            yield from rest_slots(part, _TEXT_READ)
    elif kind in ("document", "search_result"):
        yield from string_slot(part, "title")
        if kind == "document":
            yield from string_slot(part, "context")
            source = part.get("source")
            given = _kind(source) if isinstance(source, dict) else None
            if isinstance(source, dict) and given == "text":
                yield from string_slot(source, "data")
            elif isinstance(source, dict) and given == "content":
                yield from _content_slots(source, "content")
            elif isinstance(source, dict) and given not in _OPAQUE_SOURCES:
                yield from unknown_slots(source)
                source = None
            # a URL source's `url`; a base64 source's bytes are not words, while they are a PDF's
            if isinstance(source, dict):
                yield from opaque_slots(source, DOCUMENT_SOURCES[given or "content"])
                read = DOCUMENT_READ[given or "content"]
                if not plain(source, read):
                    yield from rest_slots(source, read)
            if not plain(part, _DOCUMENT_READ):  # its `citations` setting too
                yield from rest_slots(part, _DOCUMENT_READ)
        else:
            yield from string_slot(part, "source")
            yield from _content_slots(part, "content")
            if not plain(part, _SEARCH_RESULT_READ):
                yield from rest_slots(part, _SEARCH_RESULT_READ)
    elif kind == "tool_result":
        yield from _content_slots(part, "content")
        if not plain(part, _CONTENT_READ):
            yield from rest_slots(part, _CONTENT_READ)
    elif isinstance(kind, str) and kind in MEDIA_PARTS:  # images, audio and files: their bytes are no words
        yield from media_slots(part, kind)
    elif isinstance(kind, str) and kind in _THINKING:  # no signed place: its thinking is given
        yield from _thinking_slots(part, False)
    else:
        yield from unknown_slots(part)


def _responses_slots(data: dict[str, Any], skip_system: bool, skip_tool: bool) -> Iterator[Slot]:
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise unreadable(f"instructions that are {type(instructions).__name__}")
    if instructions is not None and not skip_system:
        yield data, "instructions"
    items = data.get("input")
    if isinstance(items, str):
        yield data, "input"
        return
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            raise unreadable(f"an input item that is {type(item).__name__}")
        kind, said = _kind(item), role(item, "responses")
        if kind not in (None, "message", "reasoning") and isinstance(item.get("content"), list):
            # LiteLLM's bridge makes any item's content list a message of its parts, media and all: only a message's
            # (and a reasoning's) is read as parts here, so another's is refused, not walked as plain strings
            raise unreadable(f"a {kind} item holding a content list")
        if (skip_system and said == "system") or (skip_tool and said == "tool" and "content" not in item):
            continue  # a tool's output carrying a `content` is walked: LiteLLM makes that a message of its own
        if kind == "message" or (kind is None and ("role" in item or "content" in item)):  # LiteLLM's reading
            yield from _content_slots(item, "content")
            if not plain(item, _MESSAGE_READ["responses"]):
                yield from rest_slots(item, _MESSAGE_READ["responses"])
        elif kind == "reasoning":  # its summary (and its text, when sent) are words the app may show the model
            yield from _content_slots(item, "summary")
            yield from _content_slots(item, "content")
            if not plain(item, _REASONING_READ):
                yield from rest_slots(item, _REASONING_READ)
        elif kind == "web_search_call":  # a native search's record (guardrail_native.py)
            yield from web_search_call_slots(item, skip_tool)
        elif kind == "mcp_call":  # a call and its output in one item: the model reads the output
            yield from mcp_call_slots(item, skip_tool)
        elif kind in _OUTPUTS:
            yield from _content_slots(item, "output")
            if not plain(item, _OUTPUT_READ):
                yield from rest_slots(item, _OUTPUT_READ)
        elif isinstance(kind, str) and kind in RESPONSES_RECORDS:
            yield from responses_record_slots(item)
        elif kind in _CALLS:  # its name and arguments are among the `tool_calls`
            if not plain(item, _CALL_READ):
                yield from rest_slots(item, _CALL_READ)
        else:  # an item of a type no reader knows (or none, and no role): given whole
            if isinstance(item.get("output"), list | dict):  # a tool's output of parts, as LiteLLM reads one
                raise unreadable(f"a {kind} item holding an output of parts")
            yield from unknown_slots(item)
