"""`SPELLED_STRING`, the check of a delta's string that the lanes take unread, is written with possessive repeats for
speed (surfaces/__init__.py): it must take exactly the strings its plain, backtracking spelling takes, at the same
length, whatever bytes follow (the Messages lane matches it to the event's end, the Chat lane to its first quote).
So must the Responses lane's check of a plain delta's string and end (responses_lane.py `_PLAIN`), written with
branches for its optional parts, take what the plain spelling with `?` takes, its string ending at the same place."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentic_middleware.surfaces import SPELLED_STRING
from agentic_middleware.surfaces.responses_lane import _PLAIN

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


PLAIN_WITH_OPTIONALS = rb'([ !#-\[\]-~]*)"(?:,"logprobs":\[\](?:,"obfuscation":"[0-9A-Za-z]+")?)?}\n\n'
# A delta's string and end in pieces: the ends the API writes, cut and joined anew, with bytes the string may not hold.
ENDS = st.lists(
    st.sampled_from(
        [b'"', b",", b'"logprobs":[]', b'"obfuscation":"', b"aZ09", b"}\n\n", b"}", b"\n", b"\\", b"a b", b"\xc3\xa9"]
    )
)


@given(ENDS.map(b"".join))
def test_the_responses_lanes_branches_take_what_its_optional_groups_take(spelled: bytes) -> None:
    got, expected = _PLAIN(spelled), re.compile(PLAIN_WITH_OPTIONALS).fullmatch(spelled)
    assert (got and got.end(1)) == (expected and expected.end(1))


def test_the_responses_lanes_ends() -> None:
    for end in (b'"}\n\n', b'","logprobs":[]}\n\n', b'","logprobs":[],"obfuscation":"aZ09"}\n\n'):
        assert _PLAIN(b"tok 1" + end).end(1) == 5  # type: ignore[union-attr]
    for end in (b'","logprobs":[],"obfuscation":""}\n\n', b'","obfuscation":"aZ09"}\n\n', b'"}\n'):
        assert _PLAIN(b"tok 1" + end) is None
