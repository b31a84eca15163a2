"""What a guardrail's `apply_guardrail` is given of a request, and how what it returns is written back.

LiteLLM's proxy gives a guardrail every text of the request, on every route, unless the guardrail (or LiteLLM's
global setting) says to skip system or tool messages:

- `/v1/messages`: the top-level `system` (a string, or its text blocks) first, then each message's string content
  and text blocks, and each `tool_result`'s content (a string, or its text blocks);
- `/v1/chat/completions`: every message's string content and text parts, whatever its role;
- `/v1/responses`: `instructions` first, then a string input, input messages' contents and text parts, and
  tool outputs (`function_call_output` and its kin) that are text.

Beyond LiteLLM, the words the model reads outside a `text` field (documents, search results, refusals, reasoning
summaries, annotations, native web-search records and citations: guardrail_native.py; the records of other
server and client tools, MCP, code execution, web fetch, file search, shells: guardrail_records.py; what a media
part, a Chat tool call or a Chat audio holds that is not what the API puts there: guardrail_opaque.py) are texts too,
and a block, part or item of a type no reader knows is given whole (guardrail_walk.py); where they stand is
guardrail_texts.py. `tool_calls` (guardrail_calls.py) and `images` are given as LiteLLM gives them (on Responses
too, where it gives none): a word a guardrail blocks must not reach the model where the guardrail never looked.

Each text has a slot (its container and key), so the texts a guardrail returns are written where they came from.
Its `structured_messages` are the request's messages (on Responses, its input items; on Messages the `system`
prompt leads them as a `{"role": "system"}` entry), less those the skip settings leave out; what it returns is
merged back around them.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from typing import Any

from .guardrail_calls import given_calls, write_calls
from .guardrail_extras import extra_slots
from .guardrail_opaque import TYPE_HINTS
from .guardrail_texts import TOOL_OUTPUTS
from .guardrail_texts import role as _role
from .guardrail_texts import slots as _slots
from .guardrail_values import is_file_image, is_token, is_url
from .guardrail_walk import KeyOf, check_depth, refuse_merged_keys, rename_keys
from .surfaces.responses import input_items

# The request fields that hold texts, on any route: copied before a guardrail's texts are written into them.
_TEXT_FIELDS = ("system", "messages", "input", "instructions")
# The request fields that hold texts the model reads besides the messages (guardrail_extras.py).
_SCHEMA_FIELDS = ("response_format", "text", "prompt", "output_format", "output_config")


def skips(guardrail: object) -> tuple[bool, bool]:
    """(skip system, skip tool), read as LiteLLM reads them: the guardrail's own `skip_system_message_in_guardrail`
    / `skip_tool_message_in_guardrail` when set (LiteLLM's proxy copies them there from the guardrail's
    `litellm_params`), else LiteLLM's global setting of the same name when LiteLLM is loaded, else False."""
    litellm = sys.modules.get("litellm")  # never imported here: its global is set only where it runs
    flags = []
    for name in ("skip_system_message_in_guardrail", "skip_tool_message_in_guardrail"):
        own = getattr(guardrail, name, None)
        flags.append(bool(own) if own is not None else bool(getattr(litellm, name, False)))
    return flags[0], flags[1]


class GuardrailView:
    """One guardrail's view of one request: its texts with their slots, and its structured messages."""

    def __init__(self, request_data: dict[str, Any], api_surface: str, skip_system: bool, skip_tool: bool) -> None:
        self.request_data = request_data
        self.api_surface = api_surface
        self.skip_system = skip_system
        self.skip_tool = skip_tool
        self.system_entry: dict[str, Any] | None = None  # on Messages: `system`, as the entry leading the messages
        for name in _TEXT_FIELDS + _SCHEMA_FIELDS:  # before any walk or copy: a deep one would exhaust the stack
            check_depth(request_data.get(name))
        self.slots = [
            *_slots(request_data, api_surface, skip_system, skip_tool),
            *extra_slots(request_data, api_surface),
        ]
        self.texts: list[str] = [holder[key] for holder, key in self.slots]
        self.tool_calls: list[Any] = given_calls(request_data, api_surface)
        self.images: list[str] = list(_images(request_data, api_surface, skip_tool))
        # What it was given, kept apart: a guardrail may edit the lists it gets in place and return them.
        self.given_texts = list(self.texts)
        self.given_calls = copy.deepcopy(self.tool_calls)
        self.all_messages: list[Any] = self._all_messages()
        self.in_scope = [index for index, item in enumerate(self.all_messages) if self._in_scope(item)]
        self.messages: list[Any] = (
            self.all_messages
            if len(self.in_scope) == len(self.all_messages)
            else [self.all_messages[index] for index in self.in_scope]
        )

    def _all_messages(self) -> list[Any]:
        """The messages a guardrail reads, the skipped ones included: on Messages, `system` leads as an entry."""
        if self.api_surface == "responses":
            items: list[Any] = input_items(self.request_data)
            return items
        messages = self.request_data.get("messages")
        messages = messages if isinstance(messages, list) else []
        system = self.request_data.get("system")
        if self.api_surface == "anthropic_messages" and isinstance(system, str | list) and not self.skip_system:
            self.system_entry = {"role": "system", "content": system}
            return [self.system_entry, *messages]
        return messages

    def _in_scope(self, item: Any) -> bool:
        role = _role(item, self.api_surface)
        if self.skip_system and role == "system" and self.api_surface != "anthropic_messages":
            return False  # on Messages only the top-level prompt is skipped: a system entry in messages is the client's
        return not (self.skip_tool and role == "tool")

    def write_messages(self, returned: list[Any]) -> None:
        """A guardrail's returned structured messages, merged around the ones it was not given, written back."""
        merged = returned if self.messages is self.all_messages else self._merged(returned)
        if self.api_surface == "responses":
            self.request_data["input"] = list(merged)
            return
        if self.api_surface != "anthropic_messages":
            self.request_data["messages"] = list(merged)
            return
        leading = 0
        while leading < len(merged) and isinstance(merged[leading], dict) and merged[leading].get("role") == "system":
            leading += 1
        if leading:
            contents = [merged[index].get("content") for index in range(leading)]
            self.request_data["system"] = contents[0] if leading == 1 else _as_blocks(contents)
        elif self.system_entry is not None:  # the guardrail dropped the system prompt it was given
            self.request_data.pop("system", None)
        self.request_data["messages"] = list(merged[leading:])

    def write_system_edit(self) -> None:
        """A system entry the guardrail edited in place (its list returned as given) reaches `system`."""
        if self.system_entry is not None and self.system_entry.get("content") is not self.request_data.get("system"):
            self.request_data["system"] = self.system_entry.get("content")

    def _merged(self, returned: list[Any]) -> list[Any]:
        """The messages it was not given keep their places; the returned ones fill the others, in order."""
        given = iter(returned)
        scope = set(self.in_scope)
        merged = []
        for index, item in enumerate(self.all_messages):
            if index not in scope:
                merged.append(item)
            elif (next_item := next(given, _END)) is not _END:
                merged.append(next_item)
        merged.extend(given)
        return merged

    def write_texts(self, returned: list[str]) -> None:
        """Each returned text where its original came from (on copies: the client's body stays as it was)."""
        data = self.request_data
        for name in _TEXT_FIELDS + _SCHEMA_FIELDS:
            if isinstance(data.get(name), list | dict):
                data[name] = copy.deepcopy(data[name])
        slots = [
            *_slots(data, self.api_surface, self.skip_system, self.skip_tool),
            *extra_slots(data, self.api_surface),
        ]
        renamed: dict[int, KeyOf] = {}
        dropped: set[int] = set()
        for (holder, key), text in zip(slots, returned, strict=True):
            if key == "arguments" and isinstance(holder, dict):  # an mcp_approval_request's, JSON as a call's are
                refuse_merged_keys(holder[key], text)
            if key == "thinking" and _signed(holder) and holder[key] != text:
                dropped.add(id(holder))
            holder[key] = text
            if isinstance(holder, KeyOf):
                renamed[id(holder)] = holder
        rename_keys(renamed.values())  # after every value is written under its key's old name
        if dropped:
            _drop_blocks(data, dropped)

    def write_tool_calls(self, returned: list[Any]) -> str | None:
        """The tool calls a guardrail returned, each where it came from (on copies); a problem, else None."""
        return write_calls(self.request_data, self.api_surface, returned, self.given_calls)


_END = object()


def _images(data: dict[str, Any], api_surface: str, skip_tool: bool) -> Iterator[str]:
    """Every image of the request's messages the model will see, in document order, as LiteLLM's proxy gives a
    message's images to a guardrail (read only): an image block's URL or its base64 data as a data URI (Messages),
    an `image_url` part's URL (Chat), an `input_image`'s URL (Responses, where LiteLLM gives none). LiteLLM reads a
    message's own parts only; the images nested in what the model reads are given too, each at its place among them:
    a `tool_result`'s (and an `mcp_tool_result`'s) content and a document's content source (Messages), a tool
    output's parts, a computer call's screenshot, an image generation's result and a code interpreter's image
    outputs (Responses). A guardrail that
    judges images sees them all, as its texts are all the words. With `skip_tool_message_in_guardrail` a tool's
    images are left out as its texts are: Chat's tool messages, Messages' tool results, Responses' tool outputs."""
    if api_surface == "responses":
        items = data.get("input")
        for item in items if isinstance(items, list) else ():
            skipped = skip_tool and _role(item, api_surface) == "tool" and "content" not in item
            if not isinstance(item, dict) or skipped:
                continue
            kind = item.get("type")
            if kind in (None, "message"):
                yield from _part_images(item.get("content"), False)
            elif kind in TOOL_OUTPUTS:
                output = item.get("output")
                yield from _part_images(output if isinstance(output, list) else [output], False)
            elif kind == "image_generation_call" and isinstance(result := item.get("result"), str) and result:
                yield result
            elif kind == "code_interpreter_call" and isinstance(outputs := item.get("outputs"), list):
                urls = (
                    output.get("url")
                    for output in outputs
                    if isinstance(output, dict) and output.get("type") == "image"
                )
                yield from (url for url in urls if isinstance(url, str) and url)
        return
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and not (skip_tool and _role(message, api_surface) == "tool"):
            yield from _part_images(message.get("content"), skip_tool and api_surface == "anthropic_messages")
            if api_surface == "chat_completions":  # LiteLLM's generated images on an assistant message
                images = message.get("images")
                for image in images if isinstance(images, list) else ():  # each an image, whatever type it names
                    yield from _part_images([{**image, "type": "image_url"}] if isinstance(image, dict) else (), False)


def _part_images(content: Any, skip_tool: bool) -> Iterator[str]:
    """The images of a list of parts, nested ones at their place; `skip_tool`: a Messages tool result's left out."""
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image" and isinstance(source := part.get("source"), dict):
            url, data_ = source.get("url"), source.get("data")
            media = source.get("media_type")
            if isinstance(url, str) and url:
                yield url
            elif isinstance(data_, str) and data_:
                yield f"data:{media};base64,{data_}" if isinstance(media, str) and media else data_
        elif kind in ("image_url", "input_image", "computer_screenshot"):
            for url in (part.get("image_url"), part.get("url")):  # LiteLLM reads `url` where `image_url` is empty
                url = url.get("url") if isinstance(url, dict) else url
                if isinstance(url, str) and url:
                    yield url
        elif kind in ("file", "input_file"):  # LiteLLM reads a file's bytes at the part's level or in its `file`
            file = part.get("file")
            for data_ in (part.get("file_data"), file.get("file_data") if isinstance(file, dict) else file):
                if isinstance(data_, str) and is_file_image(data_):
                    yield data_
            yield from _referenced_images(part, file if isinstance(file, dict) else {})
        elif kind in ("tool_result", "mcp_tool_result") and not skip_tool:
            yield from _part_images(part.get("content"), False)
        elif kind == "document" and isinstance(source := part.get("source"), dict) and source.get("type") == "content":
            yield from _part_images(source.get("content"), False)


def _as_blocks(contents: list[Any]) -> list[Any]:
    """Several system entries as one `system` of text blocks."""
    blocks: list[Any] = []
    for content in contents:
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
    return blocks


_IMAGE_ENDINGS = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".heic", ".heif")


def _referenced_images(part: dict[str, Any], file: dict[str, Any]) -> Iterator[str]:
    """A file's reference that is a URL of an image (a hint of an image type, or a path ending as an image's does,
    as LiteLLM guesses a file's type for Gemini): the model sees it as an image, so it is given among them."""
    hint = next((h for h in (*map(file.get, TYPE_HINTS), *map(part.get, TYPE_HINTS)) if isinstance(h, str)), "")
    for holder in (file, part):
        for key in ("file_id", "file_url"):
            url = holder.get(key)
            if isinstance(url, str) and is_url(url):
                path = url.split("?", 1)[0].lower()
                if hint.lower().startswith("image/") or path.endswith(_IMAGE_ENDINGS):
                    yield url


def _signed(holder: Any) -> bool:
    """A `thinking` block with a signature of one token, which its provider refuses altered."""
    signature = holder.get("signature") if isinstance(holder, dict) and holder.get("type") == "thinking" else None
    return isinstance(signature, str) and signature != "" and is_token(signature)


def _drop_blocks(data: dict[str, Any], dropped: set[int]) -> None:
    """Signed thinking blocks a guardrail masked, left out of the assistant turns they stood in: Anthropic refuses a
    signed block altered, on this turn and every later one, and takes a history with an earlier turn's thinking
    left out (it strips them from the model's context anyway). A message they would leave empty keeps them
    (refused, then, by a provider that checks them, as failing closed does)."""
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue  # elsewhere no provider checks a signature: the mask stays written in place
        for field in ("content", "thinking_blocks"):
            blocks = message.get(field)
            if isinstance(blocks, list) and any(id(block) in dropped for block in blocks):
                kept = [block for block in blocks if id(block) not in dropped]
                if kept or field == "thinking_blocks":
                    message[field] = kept
