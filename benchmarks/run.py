"""The command: run the chosen cases, print the table, write results.md and chart.png."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import big_events, cases, e2e, live_stream, long_answers, many_streams, mcp_case, native_urls, wide_masks
from .cases import Case, Config, Row
from .report import table, write_chart, write_markdown

HERE = Path(__file__).parent
CASES: dict[int, Case] = {
    **cases.CASES,
    **e2e.CASES,
    **long_answers.CASES,
    **mcp_case.CASES,
    **live_stream.CASES,
    **big_events.CASES,
    **native_urls.CASES,
    **many_streams.CASES,
    **wide_masks.CASES,
}


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmarks; misses are reported, not failures, so the exit status only says the harness ran."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few seconds, only to prove the harness works")
    parser.add_argument(
        "--out", type=Path, help="where results.md and chart.png go (default: benchmarks/, or a temp dir when quick)"
    )
    parser.add_argument(
        "--case", type=int, action="append", choices=sorted(CASES), help="run only this case (repeatable)"
    )
    parser.add_argument(
        "--litellm-python",
        default=os.environ.get("LITELLM_PYTHON"),
        help="a Python with LiteLLM and its proxy, for case 6 (default: $LITELLM_PYTHON, else this one if it has it)",
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        parser.error("the chart needs matplotlib: pip install -e '.[bench]'")
    config = Config(quick=args.quick, litellm_python=args.litellm_python)
    out: Path = args.out or (Path(tempfile.mkdtemp(prefix="benchmarks-")) if args.quick else HERE)
    rows: list[Row] = []
    load = os.getloadavg()[0]
    for number in args.case or sorted(CASES):
        rows += asyncio.run(CASES[number](config))
    print(table(rows))
    out.mkdir(parents=True, exist_ok=True)
    busy = f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    write_markdown(rows, out / "results.md", config.quick, busy)
    write_chart(rows, out / "chart.png")
    print(f"\nwrote {out / 'results.md'} and {out / 'chart.png'}")
    return rows
