"""The outputs: a markdown table (printed and written to results.md) and a chart of each figure against its target."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from .cases import Row


def figure(row: Row) -> str:
    """Three decimals near the targets (1.031 must not print as 1.03), fewer for large multiples."""
    if row.skipped:
        return "-"
    if row.unit != "x":
        return f"{row.figure:.3g} {row.unit}"
    return f"{row.figure:.3f}x" if row.figure < 10 else f"{row.figure:.1f}x"


def target(row: Row) -> str:
    return f"{'≥' if row.at_least else '≤'} {row.target:g}{'x' if row.unit == 'x' else ' ' + row.unit}"


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| case | what | figure | target | result | paired medians |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        result = "SKIP" if row.skipped else "PASS" if row.passed else "MISS"
        goal = "-" if row.skipped else target(row)
        lines.append(f"| {row.case}. {row.name} | {row.measure} | {figure(row)} | {goal} | {result} | {row.detail} |")
    return "\n".join(lines)


def environment() -> str:
    """What the figures were measured on: they are ratios, but a reader still wants to know the machine."""
    packages = ", ".join(f"{name} {version(name)}" for name in ("orjson", "starlette"))
    return f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, {packages}"


def write_markdown(rows: Sequence[Row], path: Path, quick: bool, load: str = "") -> None:
    """`load` says how busy the machine was: on a shared machine the absolute figures move with it."""
    mode = " (quick mode: too short to mean anything, it only proves the harness works)" if quick else ""
    busy = f" Load average (1 min) {load}." if load else ""
    path.write_text(
        f"# Benchmark results{mode}\n\n"
        f"`python -m benchmarks`: {environment()}.{busy}\n"
        "Every figure is from paired, interleaved runs in one process; times are medians.\n\n"
        f"{table(rows)}\n",
        encoding="utf-8",
    )


def write_chart(rows: Sequence[Row], path: Path) -> None:
    """One bar per figure, as a share of its target, so that cases of different units fit one axis.

    A figure whose target is a minimum is drawn as target / figure, so that on every bar shorter is better."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    shown = [row for row in reversed(rows) if not row.skipped]
    labels = [f"{row.case}. {row.name}\n{row.measure}" for row in shown]
    shares = [(row.target / max(row.figure, 1e-9)) if row.at_least else row.figure / row.target for row in shown]
    colors = ["#2e7d32" if row.passed else "#c62828" for row in shown]
    chart, axes = pyplot.subplots(figsize=(9, 0.6 * len(shown) + 1.2))
    bars = axes.barh(labels, shares, color=colors)
    for bar, row in zip(bars, shown, strict=True):
        axes.annotate(
            f" {figure(row)} (target {target(row)})",
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            va="center",
            fontsize=8,
        )
    axes.axvline(1.0, color="black", linewidth=1, linestyle="--")
    axes.set_xlabel("figure / target, or target / figure for minimums (the dashed line is the target)")
    axes.set_xlim(0, max([1.5, *(share * 1.45 for share in shares)]))
    axes.tick_params(axis="y", labelsize=8)
    chart.tight_layout()
    chart.savefig(path, dpi=110)
    pyplot.close(chart)
