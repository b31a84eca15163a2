"""The docs stay true: every relative link in README.md and docs/ resolves, and runnable code blocks run.

A code block is runnable when the line before its opening fence is `<!-- runnable -->`. The runnable blocks of
one page run in order in one namespace (so a page may build an app in one block and call it in the next), and a
block may use top-level `await`.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
RUNNABLE = "<!-- runnable -->"

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fence = [], ""
    for line in text.splitlines():
        match = _FENCE.match(line.strip())
        if fence:
            if match and line.strip().startswith(fence):
                fence = ""
            continue
        if match:
            fence = match.group(1)
            continue
        lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            seen = counts.get(slug, 0)
            counts[slug] = seen + 1
            anchors.add(slug if seen == 0 else f"{slug}-{seen}")
    anchors.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', page.read_text(encoding="utf-8")))
    return anchors


def _links(page: Path) -> list[str]:
    return [
        target
        for line in _prose_lines(page.read_text(encoding="utf-8"))
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line))
    ]


def _blocks(page: Path) -> list[tuple[int, str]]:
    """The runnable Python blocks of a page, with the line each starts on."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index].strip())
        if match:
            fence, start = match.group(1), index
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(fence):
                index += 1
            previous = lines[start - 1].strip() if start else ""
            if previous == RUNNABLE:
                blocks.append((start + 2, "\n".join(lines[start + 1 : index])))
        index += 1
    return blocks


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{_page_id(page)} has broken links: {broken}"


RUNNABLE_PAGES = [page for page in PAGES if _blocks(page)]


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=_page_id)
def test_runnable_code_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}

    async def run_all() -> None:
        for line, source in _blocks(page):
            code = compile(source, f"{_page_id(page)}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)  # a coroutine when the block awaits
            if asyncio.iscoroutine(result):
                await result

    asyncio.run(run_all())


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The link and block readers are not vacuous: a page with a broken link and a runnable block is read as such."""
    page = tmp_path / "page.md"
    page.write_text(
        "# A title\n\n[ok](#a-title) [gone](missing.md) [web](https://example.com)\n\n"
        f"{RUNNABLE}\n```python\nx = 1\n```\n\n```python\nnot run\n```\n",
        encoding="utf-8",
    )
    assert _links(page) == ["#a-title", "missing.md", "https://example.com"]
    assert _anchors(page) == {"a-title"}
    assert _blocks(page) == [(7, "x = 1")]
