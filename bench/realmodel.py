"""Item 8: the memory predictor on a real model (Gemma 3 270M, sliding-window attention).

Two figures. The peak: matrices/real.yaml (the requantised ladder F16..Q2_K, KV f16/q8_0/q4_0,
1 and 2 threads, mmap on and off, n_ctx 512 and 2048) on one virtual phone, each cell's
predicted peak against the kernel's VmHWM of the engine, as figure 7 does for the synthetic
models. The KV term: each cell's predicted KV cache against the sizes llama.cpp itself logged
while it ran (llama-bench -v), and, for n_ctx up to 32768 with and without ``swa_full``, against
what the vendored llama.cpp logs when it creates those contexts (``harness plan
matrices/real-kv.yaml --check-kv``: nothing is computed, so 32k contexts cost a second).
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from bench.common import ROOT, Figure, Lab
from bench.memory import cell_errors, figure

REAL = ROOT / "matrices" / "real.yaml"
REAL_KV = ROOT / "matrices" / "real-kv.yaml"
KV_TARGET = 0.02


def kv_figure(name: str, ratios: pd.Series, cells: int, note: str) -> Figure:
    """The worst |predicted / llama.cpp - 1| over ``ratios`` (pure)."""
    errors = (ratios - 1).abs()
    if errors.empty or errors.isna().all():
        return Figure(f"8 KV: worst error, {name}", None, "%", "-", "within ±2%, every cell",
                      False, "llama.cpp reported no cache size")
    within = int((errors <= KV_TARGET).sum())
    return Figure(f"8 KV: worst error, {name}", 100 * float(errors.max()), "%",
                  f"{within}/{cells} within", "within ±2%, every cell", within == cells, note)


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    from harness import store
    from harness.analysis.kv_size_check import check_cells
    from harness.matrix import expand, load_matrix
    from harness.plan import resolve_models

    start = time.monotonic()
    results = lab.work / "memory-real"
    lab.run(REAL, lab.devices(1), results)
    trials = store.read_table(results, "trials")
    errors = cell_errors(trials)
    peak = figure("real (Gemma 3 270M)", errors)
    peak = Figure(peak.figure.replace("7 memory", "8 memory"), peak.value, peak.unit,
                  peak.spread, peak.target, peak.met, peak.note)
    ok = trials[trials["outcome"] == "ok"]
    run_kv = kv_figure("real.yaml as run (llama-bench -v)",
                       ok["predicted_kv_bytes"] / ok["kv_reported_bytes"], len(ok),
                       f"n_ctx {sorted(set(ok['n_ctx']))}, KV {sorted(set(ok['type_k']))}")
    run_seconds = time.monotonic() - start

    matrix = load_matrix(REAL_KV)
    cells = expand(matrix)
    if quick:  # the longest and shortest contexts, every KV type, both swa_full
        cells = [c for c in cells if c.n_ctx in (512, 8192, 32768)]
    checks = check_cells(cells, resolve_models(matrix, cells))
    ratios = pd.Series([c.ratio for c in checks], dtype=float)
    worst = max(checks, key=lambda c: abs((c.ratio or 0) - 1))
    load_kv = kv_figure(
        f"n_ctx {min(c.n_ctx for c in cells)}..{max(c.n_ctx for c in cells)} x KV x swa_full",
        ratios, len(checks), f"worst {worst.cell.label()}: {worst.predicted_bytes} predicted vs "
        f"{worst.reported_bytes} B reported")
    data = {"run_seconds": run_seconds, "cells": errors.to_dict(orient="records"),
            "kv_checks": [c.as_dict() for c in checks]}
    return [peak, run_kv, load_kv], data
