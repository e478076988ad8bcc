"""The suite's own run time: one summary row with its target, and where the time went.

The quick bench is meant to be run after every change that touches a measured path (issue 50,
item 8), so it has a target of its own: every figure in at most 15 minutes on 2 cores. The row
is the whole run's wall-clock time; its note lists the figures by time, slowest first, so a run
that misses the target says which figure to look at. The llama.cpp builds the figures need are
found or compiled before the first figure (``prepare``), so a fresh cache's compiles (about 5
minutes for host-release, 7 for host-vulkan on 2 cores) are a set-up line of their own, inside
the total but in no figure's time and under no figure's load.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from bench.common import Figure

QUICK_TARGET_S = 15 * 60
# host builds a figure needs besides host-release (which every figure that drives phones needs)
BUILDS_NEEDED = {"gpusampler": ("host-vulkan",)}


def builds_needed(names: Collection[str], phone_figures: Collection[str]) -> list[str]:
    """The host build variants the figures ``names`` run, host-release first."""
    wanted = ["host-release"] if any(n in phone_figures for n in names) else []
    for name in names:
        wanted += [b for b in BUILDS_NEEDED.get(name, ()) if b not in wanted]
    return wanted


def prepare(variants: Collection[str], builds: Path) -> dict[str, Any]:
    """Find or compile ``variants`` into ``builds`` before any figure runs; how long it took and
    which of them had to be compiled (not in the cache)."""
    from harness.artifacts.cmake_build import ensure_host_build
    from harness.demo import build_cached

    start = time.monotonic()
    compiled = [v for v in variants if not build_cached(v)]
    for variant in variants:
        ensure_host_build(variant, builds)
    return {"seconds": round(time.monotonic() - start, 1), "builds": list(variants),
            "compiled": compiled}


def where_the_time_went(per_figure: Mapping[str, Mapping[str, Any]]) -> str:
    """``gpusampler 241 s, sampler 126 s, ...``: every figure's seconds, slowest first."""
    ranked = sorted(per_figure.items(), key=lambda item: -float(item[1]["seconds"]))
    return ", ".join(f"{name} {float(info['seconds']):.0f} s" for name, info in ranked)


def run_time_figure(elapsed_s: float, per_figure: Mapping[str, Mapping[str, Any]],
                    quick: bool, every_figure: bool, setup: Mapping[str, Any] | None = None
                    ) -> Figure:
    """The run's wall-clock time against the quick target; a full run's, or a quick run of a
    subset (``--only``), is information only: the target is for the whole quick suite."""
    target = f"<= {QUICK_TARGET_S} s (15 min), quick, every figure"
    met = elapsed_s <= QUICK_TARGET_S if quick and every_figure else None
    scope = "every figure" if every_figure else f"{len(per_figure)} figure(s) of the suite"
    note = where_the_time_went(per_figure)
    if setup:
        made = ", ".join(setup["compiled"]) or "nothing, all cached"
        note = f"set-up {float(setup['seconds']):.0f} s (compiled: {made}); {note}"
    return Figure(f"0 bench run time, {'quick' if quick else 'full'}, {scope}", elapsed_s, "s",
                  "-", target, met, note)


def total_line(figure: Figure) -> str:
    """The line printed under the table: the total, its target, and the slowest figures."""
    minutes, seconds = divmod(round(figure.value or 0.0), 60)
    verdict = {True: "met", False: "MISSED", None: "not judged: not a quick run of every figure"}
    return (f"total {minutes} min {seconds} s; target {figure.target}: "
            f"{verdict[figure.met]}; {figure.note}")
