"""The fields of known parts and messages that hold no words where the API puts them: an image's bytes or URL, a
file's or an audio's bytes, a media type, an image's detail, an index, a Chat tool call's id and type.

Each is left out of a guardrail's texts only while it holds what the API puts there: the bytes of the type its
field declares (a PDF, audio, a file's `file_data` behind its `data:` URL prefix: guardrail_values.py), an image
where an image belongs (`is_image`) or a URL (given as one of the `images`, as LiteLLM gives them), a media type
its field takes, one of the API's words for a detail or an audio format, one token for an index or an id. Base64
of any other type or of none (`data:text/plain;base64,...`, `data:;base64,...`, a base64 document of `text/plain`)
is refused, failing closed: the provider may decode it for the model, and no guardrail can judge it as base64.
Anything else in them (free text, an object a client made up) is given as a field no reader names is, every
string and every key but the APIs' own names: a lenient app may show the model what it does not read as bytes.
The other fields of these parts (`cache_control`, a `file_id`, fields a client made up) are walked as on any known
part (`rest_slots`). A media part is read where LiteLLM reads it (`MEDIA`), and a type hint on it that would make
a provider read its media as a text is refused (`_check_type_hints`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .guardrail_values import (
    file_data_type,
    is_audio,
    is_audio_format,
    is_bare_base64,
    is_detail,
    is_file_data,
    is_image,
    is_image_data_type,
    is_image_or_url,
    is_media_hint,
    is_pdf,
    is_pdf_type,
    is_plain_text_type,
    is_token,
    is_url,
    never,
)
from .guardrail_walk import (
    API_FIELDS,
    Slot,
    every_string,
    image_slots,
    plain,
    read_fields,
    refuse_text_base64,
    rest_slots,
    string_slot,
    unknown_slots,
    unreadable,
)

Check = Callable[[str], bool]  # whether a field's string is what the API puts there, and so no words


def opaque_slots(holder: dict[str, Any], checks: Mapping[str, Check]) -> Iterator[Slot]:
    """The fields of `holder` named in `checks` that do not hold what the API puts there (each field's test): a
    string, or every string and key (but the APIs' own names) of an object or list. A number, a boolean or null is
    no words. The reader names these fields read, so `rest_slots` leaves them to this."""
    for key, holds in checks.items():
        value = holder.get(key)
        if isinstance(value, str):
            if not holds(value):
                yield holder, key
        elif isinstance(value, dict | list):
            yield from every_string(value, 1, API_FIELDS)


def _file_data(value: str) -> bool:
    """A `file_data` left out while it is bytes the model reads as no characters (`is_file_data`). Base64 of any
    other type, or of none (`data:;base64,`, which RFC 2397 makes `text/plain`; bare base64 that is no PDF), is
    refused: the provider decodes it (a text, JSON, code, an office document's XML) for the model to read, which a
    guardrail given base64 could not judge. Failing closed: a list of text types always misses one. A known type
    whose bytes are not its own is given, its words judged. A `data:` after its start is refused (`_no_text_base64`)."""
    _no_text_base64(value, "a file_data")
    if is_file_data(value):
        return True
    if file_data_type(value) is None and is_bare_base64(value):
        raise unreadable("a file_data in base64 of no media type")
    return False


def _image_url(value: str) -> bool:
    """An image's URL (`is_image_or_url`); a data URL of a PDF or audio whose bytes are its type's, which LiteLLM
    hands on as inline data of that type, is left out too. Base64 a provider would decode as a text is refused
    (`_no_text_base64`); a data URL of an image type that is no image is given, its words judged."""
    _no_text_base64(value, "an image URL")
    return is_image_or_url(value) or (is_file_data(value) and file_data_type(value) is not None)


def _no_text_base64(value: str, what: str) -> None:
    """Refuses a data URL of a text's base64 (`refuse_text_base64`), and a `data:` after the string's start
    (`_embedded`): where a URL, a file's reference or its bytes stand."""
    _embedded(value, what)
    refuse_text_base64(value, what)


def _embedded(value: str, what: str) -> bool:
    """Whether `value` (a URL or a file's reference) is a data URL (checked then as a `file_data` is); a `data:`
    after its start is refused: LiteLLM cuts such a string at its first `data:` and hands on what follows as inline
    data, which a guardrail given the whole string in base64 could not judge. One that starts `http` (as LiteLLM
    tests it, in that case) it fetches instead, whatever its path holds (`.../metadata:thumb/cat.png`)."""
    at = value.lower().find("data:")
    if at > 0 and not value.startswith("http"):
        raise unreadable(f"{what} that holds a data URL after its start")
    return at == 0


def _file_id(value: str) -> bool:
    """A file's id: a data URL there is a `file_data` (LiteLLM prefers it to the data); a URL is words, given as a
    `file_url` is (and an image's among the `images`); any other is left to `rest_slots`, which gives one that is
    no token (`file_id` is an id it checks: `fixed`), so it is given once."""
    if _embedded(value, "a file_id"):
        return _file_data(value)
    return not (is_url(value) and is_token(value))  # one that is no token `rest_slots` gives


def _image_source_type(value: str) -> bool:
    """An image source's `media_type`: an image's (`image/jpg` too, which LiteLLM takes); any other is refused, as a
    base64 document's is (`_document_type`): LiteLLM hands a base64 source on as a data URL of that type, and a
    provider told `text/plain` decodes it for the model."""
    if not is_image_data_type(value):
        raise unreadable(f"an image of {value}")
    return True


def _file_url(value: str) -> bool:
    """A file's URL: words, given; a data URL there is a `file_data` (LiteLLM prefers it to the data)."""
    return _embedded(value, "a file_url") and _file_data(value)


def _document_type(value: str) -> bool:
    """A base64 document's `media_type`: a PDF's, left out; any other is refused as a `file_data` of one is
    (`_file_data`): Anthropic takes PDFs only, and a lenient app may decode any other for the model."""
    if not is_pdf_type(value):
        raise unreadable(f"a base64 document of {value}")
    return True


# What each part's reader leaves out while it holds what the API puts there (`opaque_slots`), and reads.
_IMAGE_SOURCE = {"data": is_image, "media_type": _image_source_type, "url": _image_url}
_IMAGE_SOURCES = frozenset(("base64", "url", "file"))
_IMAGE_URL = {"url": _image_url, "detail": is_detail, "format": is_media_hint}
_FILE = {
    "file_data": _file_data,
    "detail": is_detail,
    "file_id": _file_id,
    "file_url": _file_url,
    "format": is_media_hint,  # LiteLLM's, as on an image URL
}


class _Media:
    """Where a media part holds its media, as LiteLLM reads it: the fields at the part's own level (`outer`), and
    the fields (`inners`) that hold an object of them (`inside`) or a string (checked by `string`). LiteLLM reads an
    image's URL from the part's `url` where its `image_url` is empty (a string, or an object of one), and a file's
    bytes from the part's `file_data`, or from a `file` that is a string, before its `file` object's: each place is
    checked as the API's own is, none given as words where a provider decodes it."""

    def __init__(
        self, inners: tuple[str, ...], inside: Mapping[str, Check], string: Check, outer: Mapping[str, Check]
    ) -> None:
        self.inners = inners
        self.inside = inside
        self.inside_read = read_fields(*inside)
        self.string = string
        self.outer = outer
        self.read = read_fields(*inners, *outer)


MEDIA: dict[str, _Media] = {
    "image": _Media(("source",), _IMAGE_SOURCE, never, {}),
    "image_url": _Media(("image_url", "url"), _IMAGE_URL, _image_url, {}),
    "input_image": _Media(("image_url", "url"), _IMAGE_URL, _image_url, {"detail": is_detail}),
    # A computer call's screenshot (in a `computer_call_output`, or a message's part), which LiteLLM reads as an image.
    "computer_screenshot": _Media(
        ("image_url", "url"), _IMAGE_URL, _image_url, {"detail": is_detail, "file_id": _file_id}
    ),
    "input_audio": _Media(("input_audio",), {"data": is_audio, "format": is_audio_format}, never, {}),
    "file": _Media(("file",), _FILE, _file_data, _FILE),
    "input_file": _Media(("file",), _FILE, _file_data, _FILE),
}
MEDIA_PARTS = frozenset(MEDIA)
# The fields LiteLLM takes a media part's type from (the first it finds, at the part's level or its inner object's)
# and hands on as its media's type, over the type a data URL declares (`_check_type_hints`).
TYPE_HINTS = ("format", "mime_type", "content_type")
_HINT_HOLDERS = ("source", "image_url", "url", "file", "input_audio")  # the objects of a part that hold them
# The fields whose strings a provider decodes by such a hint: bytes (`_INLINE`), or a URL or reference.
_INLINE = frozenset(("file_data", "file", "data"))
_IMAGE_FIELDS = frozenset(("url", "image_url"))  # bare base64 there is an image's bytes to LiteLLM
_DECODED = ("file_data", "file", "data", "url", "image_url", "file_id", "file_url")
# A document's source by its type: a base64 one's bytes (a PDF's) and media type; a `text` source's media type
# (its `data` is its words, read); a URL's or a file's (no bytes, and no media type in the API); a `content`
# source's (its blocks, read): bytes there are made up, and given.
DOCUMENT_SOURCES: dict[str, Mapping[str, Check]] = {
    "base64": {"data": is_pdf, "media_type": _document_type},
    "text": {"media_type": is_plain_text_type},
    "url": {"data": never, "media_type": is_pdf_type, "url": _file_url},
    "file": {"data": never, "media_type": is_pdf_type, "file_id": _file_id},
    "content": {"data": never, "media_type": never},
}
# What is read of each, for `rest_slots`: the fields checked, and a `content` source's blocks.
DOCUMENT_READ = {
    kind: read_fields("data", "media_type", "content", *checks) for kind, checks in DOCUMENT_SOURCES.items()
}


def media_slots(part: dict[str, Any], kind: str) -> Iterator[Slot]:
    """A media part's words (`MEDIA`), none in an ordinary one: Messages' `image` (its `source`), Chat's
    `image_url` (a URL, or an object of one), Responses' `input_image`, `input_audio` (its `data` and `format`),
    and a file, Responses' `input_file` and Chat's `file` (its `file_data`; its name and URL are words, given)."""
    media = MEDIA[kind]
    inners = [(key, part.get(key)) for key in media.inners if part.get(key) is not None]
    # LiteLLM takes a hint from the part and from its media objects, whatever the part's type (`image_url` on an
    # `image` part too)
    holders = [part, *(value for key in _HINT_HOLDERS if isinstance(value := part.get(key), dict))]
    if kind != "input_audio":  # an audio's `format` is checked as the API's words for one (`is_audio_format`)
        _check_type_hints(holders)
    yield from opaque_slots(part, media.outer)
    for key, value in inners:
        source = value.get("type") if kind == "image" and isinstance(value, dict) else None
        if kind == "image" and isinstance(value, dict) and not (isinstance(source, str) and source in _IMAGE_SOURCES):
            yield from unknown_slots(value)  # a `text` source, say: no image, its words given whole
        elif isinstance(value, dict):
            yield from _fields(value, media.inside, media.inside_read)
        else:  # a URL or a file's bytes as a string; anything else where the object belongs is no media, and given
            yield from opaque_slots(part, {key: media.string})
    if not plain(part, media.read):
        yield from rest_slots(part, media.read)


def _check_type_hints(holders: list[dict[str, Any]]) -> None:
    """Refuses a media type hint (`TYPE_HINTS`) but a media's (`is_media_hint`) where a provider would decode what
    the part holds by it: LiteLLM hands the hint on as the media's type, so a PDF's or a WAV's bytes of ASCII words
    hinted `text/plain` reach a provider (Gemini) as a text the model reads, where the walk left them out as a PDF
    or audio, and so would URL-safe base64 or a reference holding `base64` (Bedrock decodes any string holding
    `base64` and a comma as base64) or `data:`. Beside references alone (a `gs://` or `https://` URL, a file's id)
    a text's hint is the caller's word for what the file holds, which no guardrail reads either way: given."""
    for holder in holders:
        for key in TYPE_HINTS:
            hint = holder.get(key)
            if hint is None or (isinstance(hint, str) and is_media_hint(hint)):
                continue
            if any(_decodable(inner) for inner in holders):
                named = hint if isinstance(hint, str) else type(hint).__name__
                raise unreadable(f"a media part whose {key} is {named or 'empty'}")
            return  # beside references alone: every hint is the caller's word


def _decodable(holder: dict[str, Any]) -> bool:
    """Whether a media part (or its inner object) holds what a provider decodes by its type hint: bytes (a
    `file_data`, a `file` or `data` string, an image's URL that is no URL), or a reference (a URL, a file's id)
    holding `base64` or `data:`."""
    for key in _DECODED:
        value = holder.get(key)
        if not isinstance(value, str) or value == "":
            continue
        if key in _INLINE or (key in _IMAGE_FIELDS and not is_url(value)):
            return True
        lowered = value.lower()
        if "base64" in lowered or "data:" in lowered:
            return True
    return False


def image_url_slots(holder: dict[str, Any], key: str) -> Iterator[Slot]:
    """A record's image URL (a code interpreter's image output's `url`): left out while it is an image, given
    otherwise (a URL too: `image_slots`), but base64 a provider would decode as a text, refused (`_no_text_base64`)."""
    value = holder.get(key)
    if isinstance(value, str):
        _no_text_base64(value, "an image URL")
    yield from image_slots(holder, key)


def _fields(holder: dict[str, Any], checks: Mapping[str, Check], read: frozenset[str]) -> Iterator[Slot]:
    yield from opaque_slots(holder, checks)
    if not plain(holder, read):
        yield from rest_slots(holder, read)


# A Chat tool call's fields its reader reads (its function or custom tool, among the `tool_calls`), and of those
# the name and what it was called with (among the `tool_calls` too, as a Messages `tool_use`'s name and input are).
_CALL_READ = read_fields("function", "custom", "index")
_FUNCTION_READ = read_fields("name", "arguments", "input")
_CALL = {"index": never}  # a streamed call's index, a number (its `type`, a fixed word, is `rest_slots`'s)
# A Chat message's `audio`: an id in a request, the model's answer in a rerun (its bytes, and its transcript: words).
_MESSAGE_AUDIO = {"data": is_audio, "expires_at": never}  # when it expires: a number
_MESSAGE_AUDIO_READ = read_fields("transcript", *_MESSAGE_AUDIO)
# A citation's `encrypted_index` (Anthropic's): one token.
CITATION = {"encrypted_index": is_token}


def chat_call_slots(message: dict[str, Any]) -> Iterator[Slot]:
    """A Chat message's tool calls' words beyond the `tool_calls` a guardrail is given: an id or a type that is no
    token, a field a client made up on a call or its function (guardrail_calls refuses a call of another shape).
    Each field is given once: its id and type by `rest_slots` (which checks them as `fixed`), its index here; a
    field given twice would have the guardrail's second edit of it overwrite its first (a mask lost)."""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        yield from opaque_slots(call, _CALL)
        if not plain(call, _CALL_READ):
            yield from rest_slots(call, _CALL_READ)
        for key in ("function", "custom"):
            function = call.get(key)
            if isinstance(function, dict) and not plain(function, _FUNCTION_READ):
                yield from rest_slots(function, _FUNCTION_READ)
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and not plain(legacy, _FUNCTION_READ):
        yield from rest_slots(legacy, _FUNCTION_READ)


def audio_slots(message: dict[str, Any]) -> Iterator[Slot]:
    """A Chat message's `audio`'s words: its `transcript` (the model's audio answer, which the loop carries into the
    rerun), an id that is no token, bytes that are not base64, fields made up; an `audio` of another shape whole."""
    audio = message.get("audio")
    if isinstance(audio, dict):
        yield from string_slot(audio, "transcript")
        yield from _fields(audio, _MESSAGE_AUDIO, _MESSAGE_AUDIO_READ)
    elif audio is not None:
        yield from opaque_slots(message, {"audio": never})
