"""Item 3: the same matrix on 1, 2 and 4 virtual phones (local backend: one thread per phone).

Every phone runs every cell of the matrix (phones are measured, not shared out), so perfect
scaling means N phones finish in the time one does: efficiency(N) = makespan(1) / makespan(N).
The cells use one engine thread each, so the engine needs N cores for N phones: the ceiling is
min(1, cores / (N × threads)). Phones are warmed first (the artefacts pushed), so no run pays a
first push; the counts are run in a rotating order when there are several rounds.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from bench.common import MATRICES, Figure, Lab, Timeline

MATRIX = MATRICES / "farm.yaml"
WARM = MATRICES / "farm-warm.yaml"
COUNTS = (1, 2, 4)
THREADS = 1  # engine threads per cell in farm.yaml


def cpu_ceiling(phones: int, cores: int, threads: int = THREADS) -> float:
    """The best efficiency a CPU-bound engine can reach on this host (pure, tested)."""
    return min(1.0, cores / (phones * threads))


def count_order(index: int) -> list[int]:
    shift = index % len(COUNTS)
    return list(COUNTS[shift:] + COUNTS[:shift])


def efficiency(makespans: dict[int, list[float]]) -> dict[int, float]:
    """Median makespan on 1 phone over the median on N (pure, tested)."""
    one = statistics.median(makespans[1])
    return {n: one / statistics.median(spans) for n, spans in makespans.items()}


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    rounds = 2 if quick else 3
    cores = os.cpu_count() or 1
    devices = lab.devices(max(COUNTS))
    results = lab.work / "farm-results"
    warm = lab.run(WARM, devices, results)
    runs: list[dict[str, Any]] = []
    for index in range(rounds):
        for count in count_order(index):
            timeline = Timeline()
            load = os.getloadavg()[0]
            summary = lab.run(MATRIX, devices[:count], results, timeline=timeline)
            spans = timeline.trial_spans()
            runs.append({"round": index, "phones": count, "makespan_s": summary.wall_s,
                         "load_1min_before": load,
                         "outcomes": dict(summary.outcomes()),
                         "bytes_pushed": sum(d.bytes_pushed for d in summary.devices),
                         "tg_tps": [s["tg_tps"] for s in spans],
                         "trial_span_s": [s["span_s"] for s in spans]})
    makespans: dict[int, list[float]] = {n: [] for n in COUNTS}
    for run in runs:
        makespans[run["phones"]].append(run["makespan_s"])
    eff = efficiency(makespans)
    tg = {n: statistics.median([t for r in runs if r["phones"] == n for t in r["tg_tps"] if t])
          for n in COUNTS}
    figures = []
    for n in COUNTS[1:]:
        ceiling = cpu_ceiling(n, cores)
        fits = ceiling >= 1.0
        figures.append(Figure(
            f"3 farm: efficiency, {n} phones", eff[n], "ratio",
            f"makespan {statistics.median(makespans[1]):.1f} s -> "
            f"{statistics.median(makespans[n]):.1f} s",
            ">= 0.85" if fits else f"n/a: ceiling {ceiling:.2f}",
            eff[n] >= 0.85 if fits else None,
            f"tg {tg[1]:.0f} -> {tg[n]:.0f} tok/s per phone; {n} engine threads on "
            f"{cores} cores" + ("" if fits else " (CPU-bound engine: cores limit it)")))
    return figures, {"rounds": rounds, "cores": cores, "runs": runs,
                     "warm_bytes_pushed": sum(d.bytes_pushed for d in warm.devices),
                     "efficiency": {str(k): v for k, v in eff.items()},
                     "median_tg_tps": {str(k): v for k, v in tg.items()}}
