"""Case 11: what the native search domain filters cost per result URL.

Each result of a filtered search has its URL read by the WHATWG rules (ada, native/domains.py) and judged against
the filter's rules. The figure is the time per URL of `NativeOptions.allows` with an allow list and a block list
of a few entries, over URLs of the shapes search results have, against the `urlsplit` reading it replaced (which
read some URLs otherwise than a browser does, see docs/native-tools.md#how-urls-are-read).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from agentic_middleware.native import NativeOptions

from .cases import Config, Row
from .harness import median, paired, sync_sample, us

URLS = [
    "https://docs.example.com/guide/page-1.html?ref=search",
    "https://en.example.org/wiki/Canberra",
    "http://blog.test/2026/11/30/a-long-title-of-a-post",
    "https://xn--caf-dma.example/menu",
    "https://news.test/story/123456#comments",
]
OPTIONS = NativeOptions.read(
    {
        "type": "web_search_20250305",
        "allowed_domains": ["example.com", "example.org/wiki", "blog.test", "café.example", "news.test"],
        "blocked_domains": ["spam.test", "127.0.0.1", "example.com/private"],
    }
)


def filtered() -> None:
    for url in URLS:
        OPTIONS.allows(url)


def split() -> None:
    for url in URLS:
        urlsplit(url).hostname  # noqa: B018 (the old reading, for scale)


async def native_urls(config: Config) -> list[Row]:
    samples = await paired(
        {"ada": sync_sample(filtered, batch=config.batch), "urlsplit": sync_sample(split, batch=config.batch)},
        config.pairs(2000),
    )
    per_url = median(samples["ada"]) / len(URLS)
    detail = (
        f"{len(URLS)} URLs against 5 allowed and 3 blocked entries: {us(per_url)} each; urlsplit's host alone, "
        f"as the filter read it before: {us(median(samples['urlsplit']) / len(URLS))}"
    )
    return [Row(11, "native domain filters", "cost per result URL (p50)", per_url / 1e3, 50.0, detail, unit="µs")]


CASES = {11: native_urls}
