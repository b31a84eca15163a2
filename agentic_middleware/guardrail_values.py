"""What the APIs put in the fields of a request that hold no words (ids, fixed words, settings, images, bytes, media
types, URLs), told from words a client wrote there: the tests by which a guardrail's walk leaves a field out.

A field taken for one of these is left out only while it holds what the API puts there; anything else in it is
given to the guardrails (guardrail_walk.py, guardrail_opaque.py), since a lenient app may show the model what it
does not read as bytes. What can not be told apart is not given: a single word of an id's characters, a word of 4,
8... letters of base64, a word after `https://` in a URL (given as an image). Its own module because both walks,
and a tool's image result (tool_results.py), ask the same questions.
"""

from __future__ import annotations

import base64
import re
from typing import Any

# Fields of a known record whose values are not words: ids, the type, a role or status (fixed words of the API),
# a provider's signature and cache settings, a caller's ids. The model app reads none of them as text.
HARMLESS = frozenset(
    (
        "type",
        "id",
        "call_id",
        "tool_use_id",
        "tool_call_id",
        "item_id",
        "approval_request_id",
        "file_id",
        "container_id",
        "role",
        "status",
        "signature",
        "cache_control",
        "caller",
    )
)

# The roles of the APIs' messages, and the statuses of the Responses items (read from the openai SDK's types; no
# Messages block has one): the fixed words a `role` or `status` holds. Any other word there is given (`fixed`).
ROLES = frozenset(("user", "assistant", "system", "developer", "tool", "function"))
STATUSES = frozenset(
    ("in_progress", "completed", "incomplete", "failed", "searching", "interpreting", "generating", "calling")
)
# What an id, a type, a signature or an encrypted content of the APIs is made of: one token of ASCII letters,
# digits and `_-.:+/=`. Anthropic's ids match `^[a-zA-Z0-9_-]+$` (its API's own pattern); OpenAI's are `call_…`,
# `fc_…`, `msg_…`, `rs_…`, `file-…`; LiteLLM's Gemini tool call ids carry a base64 thought signature after
# `__thought__`, and some providers' ids are `functions.name:0`; signatures and encrypted contents are base64
# (standard or URL-safe) or, ours, `amw1.` and base64. Free text (a space, other punctuation, a letter beyond
# ASCII) is not one, and is given; a single word of these characters can not be told from an id, and is not.
_TOKEN = re.compile(r"[A-Za-z0-9_.:+/=-]*")
# The settings objects the APIs put in `cache_control` (`{"type": "ephemeral", "ttl": "5m"}`) and a Messages
# tool call's `caller` (`{"type": "code_execution_20250825", "tool_id": "srvtoolu_…"}`): their keys, each value a
# token. An object with any other key, or a value not a token, is given, keys and all.
_SETTINGS = {"cache_control": frozenset(("type", "ttl")), "caller": frozenset(("type", "tool_id"))}
# The fields left out only while they hold what the API puts there (`fixed`).
CHECKED = HARMLESS.union(("encrypted_content",))


def fixed(key: str, value: Any) -> bool:
    """Whether the value of a field taken for an id or a fixed word (`CHECKED`) is what the API puts there, and so
    no words: left out. A free-text id or status, a role none of the APIs has, an object in an id, or cache
    settings with a key the API does not have, are words a client wrote where a lenient app may show them."""
    if isinstance(value, str):
        if key == "role":
            return value in ROLES
        if key == "status":
            return value in STATUSES
        return key not in _SETTINGS and _TOKEN.fullmatch(value) is not None
    if isinstance(value, dict):
        names = _SETTINGS.get(key)
        return (
            names is not None
            and names.issuperset(value)
            and all(isinstance(inner, str) and _TOKEN.fullmatch(inner) for inner in value.values())
        )
    return not isinstance(value, list)  # a number, a boolean, null: no words


# Base64 as the APIs take bytes: the standard alphabet, `=` padding only at the end, no whitespace, a length of
# fours (checked apart, `_whole`), as the SDKs and browsers encode. One compiled character class over the whole
# string: 7 ms for a 5 MB image (6.8 MB of base64), where `binascii.a2b_base64(..., strict_mode=True)` takes 12 ms
# and decodes the whole image into memory, and a pattern of four-character groups (which would check the length
# too) 140 ms. Possessive (`*+`): a string that is not one fails in one pass, where backtracking over a 5 MB string
# with a space at its end took 130 ms.
_BASE64 = "[A-Za-z0-9+/]*+={0,2}+"
_BYTES = re.compile(_BASE64)
# A MIME type of no parameters (`application/pdf`); a file's data, with its `data:` URL prefix or without; an image
# behind a data URL of the four image types the APIs take, or bare; a URL of any scheme, one token of printable ASCII.
_MIME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*+/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*+"
_MIME_TYPE = re.compile(_MIME)
_FILE_DATA = re.compile(f"(?:data:{_MIME};base64,)?+{_BASE64}")
_IMAGE = re.compile(f"(?:data:image/(?:png|jpeg|gif|webp);base64,)?+{_BASE64}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*+://[!-~]++")
# How the bytes of a PNG, JPEG and GIF begin; a WebP's are `RIFF`, four bytes of size, `WEBP` (`_opens_as_image`).
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8")
# The API's words for an image's or a file's detail and an audio's format (read from the openai SDK's types).
_DETAILS = frozenset(("auto", "low", "high", "original"))
_AUDIO_FORMATS = frozenset(("wav", "mp3", "aac", "flac", "opus", "pcm16"))


def _whole(text: str, start: int) -> bool:
    """Whether the base64 from `start` on (its alphabet checked) is a length of fours: whole, as encoders write it."""
    return (len(text) - start) % 4 == 0


def is_image(text: str) -> bool:
    """Whether a whole string is an image and not words: strict base64 whose bytes open as a PNG, JPEG, GIF or
    WebP does, bare or in a `data:image/png|jpeg|gif|webp;base64,` URL. A field the API fills with an image may hold
    anything a client writes there: words after an image's first bytes, whitespace, another media type (a subtype is
    a token, and a token can be a word) make it a text, given to the guardrail. Fast on a multi-MB image: one C call
    checks the whole alphabet (`_BASE64`), and only the first 16 characters of the base64 are decoded."""
    return _IMAGE.fullmatch(text) is not None and _opens_as_image(text, text.find(",") + 1)  # bare: no comma


def is_base64_image(data: str) -> bool:
    """Whether `data` is bare base64 of an image by `is_image`'s rule: what a tool's image must be (`tool_results`),
    as its bytes are written into the next round where no guardrail reads them."""
    return _BYTES.fullmatch(data) is not None and _opens_as_image(data, 0)


def _opens_as_image(text: str, start: int) -> bool:
    """Whether the base64 from `start` on (its alphabet checked) is whole and its bytes open as a PNG, JPEG, GIF or
    WebP does."""
    if not _whole(text, start):
        return False
    head = base64.b64decode(text[start : start + 16])
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def is_base64(value: str) -> bool:
    """Bytes as the APIs take them in a document's, an audio's or a message audio's `data`."""
    return _BYTES.fullmatch(value) is not None and _whole(value, 0)


def is_file_data(value: str) -> bool:
    """A file's `file_data`: base64, behind its `data:<MIME type>;base64,` prefix or bare."""
    return _FILE_DATA.fullmatch(value) is not None and _whole(value, value.find(",") + 1)  # bare: no comma


def is_media_type(value: str) -> bool:
    return _MIME_TYPE.fullmatch(value) is not None


def is_image_or_url(value: str) -> bool:
    """An image's URL, where the API takes an image or a URL of one (a URL is given as one of the `images`)."""
    return is_image(value) or _URL.fullmatch(value) is not None


def is_token(value: str) -> bool:
    """An id's or an index's one token (`fixed`)."""
    return fixed("id", value)


def is_format(value: str) -> bool:
    """An audio's format, or (LiteLLM's, on an image URL or a file) a MIME type."""
    return value in _AUDIO_FORMATS or is_media_type(value)


def is_detail(value: str) -> bool:
    return value in _DETAILS


def never(value: str) -> bool:
    """A field whose string is never what the API puts there (it puts a number, or an object): given."""
    return False
