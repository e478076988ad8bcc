"""Item 7: the memory predictor against measured peaks, per cell.

Runs the smoke matrix (tiny ladder) and a bench-ladder matrix on one virtual phone and compares
each cell's ``predicted_peak_bytes`` with the largest VmHWM (the kernel's high-water mark of the
engine's resident memory, read by the sampler) over the cell's trials. The largest, not the
median: a sample can only under-read a peak (a sub-second trial may end before the sampler's
read after the model is loaded), never over-read it. Cells where no trial got a memory sample
are counted as unmeasured, and the target then counts as not met. Error is
(predicted - measured) / measured: negative means the predictor under-estimates, which is the
dangerous side (a cell planned as fitting that the low-memory killer then kills).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from bench.common import MATRICES, ROOT, Figure, Lab

SMOKE = ROOT / "matrices" / "smoke.yaml"
BENCH = MATRICES / "memory.yaml"
TARGET = 0.10


def cell_errors(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: predicted, measured (max over ok trials), relative errors (pure)."""
    ok = trials[trials["outcome"] == "ok"]
    grouped = ok.groupby("cell_id").agg(
        model=("model_name", "first"), quant=("quant", "first"), n_ctx=("n_ctx", "first"),
        type_k=("type_k", "first"), threads=("threads", "first"),
        predicted=("predicted_peak_bytes", "first"), rss=("peak_rss_bytes", "max"),
        hwm=("vm_hwm_bytes", "max"), hwm_min=("vm_hwm_bytes", "min"),
        trials=("trial_id", "count"), measured_trials=("vm_hwm_bytes", "count"))
    grouped["error_rss"] = (grouped["predicted"] - grouped["rss"]) / grouped["rss"]
    grouped["error_hwm"] = (grouped["predicted"] - grouped["hwm"]) / grouped["hwm"]
    return grouped.reset_index()


def worst(errors: pd.DataFrame, column: str = "error_hwm") -> pd.Series | None:
    """The cell with the largest absolute error among measured cells, or None."""
    measured = errors[errors[column].notna()]
    return None if measured.empty else measured.loc[measured[column].abs().idxmax()]


def _run(lab: Lab, matrix: Path, name: str) -> pd.DataFrame:
    from harness import store

    results = lab.work / f"memory-{name}"
    lab.run(matrix, lab.devices(1), results)
    return cell_errors(store.read_table(results, "trials"))


def figure(name: str, errors: pd.DataFrame) -> Figure:
    """The table row of one matrix: its worst measured cell, and how many cells pass (pure)."""
    err = errors["error_hwm"]
    within = int((err.abs() <= TARGET).sum())
    unmeasured = int(err.isna().sum())
    bad = worst(errors)
    if bad is None:
        return Figure(f"7 memory: worst error, {name} matrix", None, "%", "-",
                      "within ±10%, every cell", False, "no cell was measured")
    note = (f"{within}/{len(errors)} within; worst {bad['quant']} ctx{int(bad['n_ctx'])} "
            f"kv={bad['type_k']}: {bad['predicted'] / 2**20:.1f} predicted vs "
            f"{bad['hwm'] / 2**20:.1f} MiB VmHWM")
    if unmeasured:
        note += f"; {unmeasured} cell(s) got no memory sample"
    return Figure(
        f"7 memory: worst error, {name} matrix", 100 * float(bad["error_hwm"]), "%",
        f"{100 * err.min():+.1f}..{100 * err.max():+.1f}% over {len(errors) - unmeasured} cells",
        "within ±10%, every cell", within == len(errors), note)


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    figures, data = [], {}
    for name, matrix in (("smoke", SMOKE), ("bench", BENCH)):
        start = time.monotonic()
        errors = _run(lab, matrix, name)
        figures.append(figure(name, errors))
        data[name] = {"seconds": time.monotonic() - start,
                      "cells": errors.to_dict(orient="records")}
    return figures, data
