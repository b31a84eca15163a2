"""`SPELLED_STRING`, the check of a delta's string that the lanes take unread, is written with possessive repeats for
speed (surfaces/__init__.py): it must take exactly the strings its plain, backtracking spelling takes, at the same
length, whatever bytes follow (the Messages lane matches it to the event's end, the Chat lane to its first quote)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentic_middleware.surfaces import SPELLED_STRING

BACKTRACKING = rb'[^"\\\x00-\x1f]*(?:\\[^\x00-\x1f][^"\\\x00-\x1f]*)*"'
# The bytes that decide a match, with some that do not: quotes, backslashes, control characters, the event's end.
PIECES = st.lists(
    st.sampled_from([b'"', b"\\", b"\\\\", b'\\"', b"a", b" ", b"\n", b"\x1f", b"\x7f", b"\xc3\xa9", b"}"])
)


@given(PIECES.map(b"".join))
def test_the_possessive_spelling_takes_what_the_backtracking_one_takes(spelled: bytes) -> None:
    for suffix in (b"", b"}}\n\n"):
        possessive, plain = re.compile(SPELLED_STRING + suffix), re.compile(BACKTRACKING + suffix)
        for check in ("match", "fullmatch"):
            got, expected = getattr(possessive, check)(spelled), getattr(plain, check)(spelled)
            assert (got and got.end()) == (expected and expected.end())


def test_plain_text_an_escaped_quote_and_a_raw_line_end() -> None:
    match = re.compile(SPELLED_STRING).match
    assert match(b'hello"}}').end() == 6  # type: ignore[union-attr]
    assert match(rb'say \"hi\""}}').end() == 11  # type: ignore[union-attr]
    assert match(b'a\nb"') is None and match(rb"ends in \"") is None
