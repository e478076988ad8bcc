"""Models bigger than the phone's RAM, end to end (issue 29): matrices/bigger-than-ram.yaml on
the small-RAM virtual phone (devices/virtual/small-ram.yaml), whose memory the host kernel
enforces (cgroup model) and whose storage reads at 100 MB/s from a disk of its own.

Where the host cannot give a phone a memory cgroup these skip, naming why: the simulated model
kills what a phone would page, which is what this issue is about.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness import store
from harness.artifacts.builds import Build
from harness.artifacts.gguf_info import read_model_info
from harness.device import get_device
from harness.run.paging_measure import PAGING_SHARE
from harness.run.runner import RunOptions, execute
from harness.virtual import cgroups

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "matrices" / "bigger-than-ram.yaml"
SMALL = str(REPO / "devices" / "virtual" / "small-ram.yaml")
MB = 1_000_000
MiB = 2**20


def _cgroups_or_skip(path: Path) -> None:
    reason = cgroups.probe(path)
    if reason is not None:
        pytest.skip(f"no cgroup memory model here: {reason}")


def _engine_text_bytes(build: Build) -> int:
    """The engine binary's size and its shared libraries' (ldd: the host's loader resolves
    them), the most of its text that can be resident."""
    binary = build.binary()
    listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    libs = {Path(word) for line in listing.stdout.splitlines() for word in line.split()
            if word.startswith("/") and Path(word).is_file()}
    return binary.stat().st_size + sum(lib.stat().st_size for lib in libs)


def _run(matrix: Path, phone: Any, results: Path, build: Build) -> pd.DataFrame:
    execute(matrix, [get_device(phone.serial)],
            RunOptions(results=results, builds=build.path.parent, reserve_bytes=0,
                       no_skip=True))
    return store.read_table(results, "trials")


def _cells(trials: pd.DataFrame) -> dict[tuple[str, str, str, str], pd.DataFrame]:
    keys = ["model_name", "quant", "load_mode", "cache"]
    return {tuple(k): rows for k, rows in trials.groupby(keys)}  # type: ignore[misc]


def test_bigger_than_ram_pages_with_mmap_is_killed_without_and_pages_at_storage_speed(
        virtual_phones: Any, tmp_path: Path, host_build: Build, bench_ladder: Any,
        moe_ladder: Any) -> None:
    _cgroups_or_skip(tmp_path)
    (phone,) = virtual_phones(1, profile=SMALL)
    assert phone.info.memory_model == "cgroup" and phone.info.storage_read_mb_s == 100
    cells = _cells(_run(MATRIX, phone, tmp_path / "r", host_build))
    limit = 128 * MiB

    dense = cells[("bench", "F16", "mmap", "cold")]
    assert (dense["outcome"] == "ok").all(), dense[["outcome", "error"]]
    assert dense["paging"].all() and (dense["memory_model"] == "cgroup").all()
    assert (dense["storage_read_mb_s"] == 100).all()
    size = int(dense["model_file_bytes"].iloc[0])
    assert size > limit  # the file is bigger than what the phone leaves the engine
    # resident never above the phone's limit. The engine's PSS also counts pages the phone's
    # cgroup was never charged for: the engine binary's and the host libraries' text (pushed by
    # adbd or cached by the host, both outside the cgroup) and what the launch found of the model
    # still cached (charged to adbd's push); the kernel bounds the rest by the limit
    outside = _engine_text_bytes(host_build) + dense["cache_resident_bytes"].fillna(0)
    assert (dense["peak_pss_bytes"] <= limit + outside).all(), (
        dense[["peak_pss_bytes", "vm_hwm_bytes", "cache_resident_bytes"]], outside)
    assert (dense["peak_pss_bytes"] < size).all()  # the whole file was never resident
    assert (dense["read_bytes"] >= 2 * size).all() and (dense["major_faults"] > 0).all()
    # every token reads nearly every matrix again: more than half the file per token
    assert (dense["read_bytes_per_token"] >= 0.5 * size).all(), dense["read_bytes_per_token"]
    measured = dense["tg_tps"].median()
    predicted = dense["predicted_paging_tg_tps"].iloc[0]
    # the planner's storage-bound speed within the accuracy it claims: bench figure 11's target
    # (docs/benchmarks.md), every paging cell within +-35% of the measured median
    assert 0.65 <= predicted / measured <= 1.35, (predicted, measured)

    killed = cells[("bench", "F16", "none", "cold")]
    assert (killed["outcome"] == "oom_killed").all(), killed[["outcome", "error"]]
    for signals in killed["oom_signals"]:
        assert "sigkill" in signals.split(",") and {"vm_hwm_near_available",
                                                    "memory_pressure"} & set(signals.split(","))
    assert killed["paging"].isna().all()  # never decoded: no label

    moe = cells[("moe", "F16", "mmap", "cold")]
    assert (moe["outcome"] == "ok").all() and moe["paging"].all()
    assert (moe["peak_pss_bytes"] < moe["model_file_bytes"]).all()

    cold = cells[("bench", "Q8_0", "mmap", "cold")]
    warm = cells[("bench", "Q8_0", "mmap", "warm")]
    assert (cold["outcome"] == "ok").all() and (warm["outcome"] == "ok").all()
    file_bytes = int(cold["model_file_bytes"].iloc[0])
    at_storage_ms = file_bytes / (100 * MB) * 1000
    assert (cold["cache_resident_bytes"] <= 0.05 * file_bytes).all()  # evicted at the launch
    assert (warm["cache_resident_bytes"] >= 0.95 * file_bytes).all()  # read just before
    # the load must read every weight but the token embeddings, which stay mapped and are read a
    # row per token (17% of this file): whether the kernel's WILLNEED readahead reads them before
    # the load ends is a race (CI saw 681 ms and 830 ms for two cold trials, 806 ms the file)
    embd = read_model_info(bench_ladder["Q8_0"]).token_embd_bytes
    must_read_ms = (file_bytes - embd) / (100 * MB) * 1000
    assert (cold["load_ms"] >= 0.9 * must_read_ms).all(), (cold["load_ms"], must_read_ms)
    assert (warm["load_ms"] <= 0.5 * at_storage_ms).all(), (warm["load_ms"], at_storage_ms)
    assert not cold["paging"].any() and not warm["paging"].any()  # it fits: no paging
    _fitting_reads_nothing_while_decoding(warm)

    # halving the storage speed slows the paging cell and leaves the fitting one alone
    _halving_slows_paging_and_leaves_a_fitting_cell_alone(virtual_phones, tmp_path, host_build,
                                                          cells)


# F16 pages, evicted before each launch (a cold start every time: what stays resident between
# trials would otherwise decide how much a token reads); Q8_0 fits, read before each launch. The
# same cells as MATRIX's, which measures them at 100 MB/s and checks their output (the same
# build, files and knobs: checking them again here cost about 30 s of paging at 50 MB/s). Q8_0
# runs cold before it runs warm, as in MATRIX: read in straight after the F16 cells, whose pages
# the engine used over and over, only 77% of it stayed cached (the run records that trial's
# cache as unknown, with that reason)
HALVING = """
name: halving
axes:
  build: [host-release]
  model: [bench]
  quant: [F16]
  n_ctx: [256]
  kv: [f16]
  threads: [1]
  affinity: [all]
  flash_attn: [auto]
  load_mode: [mmap]
  cache: [cold]
  n_batch: [64]
  n_ubatch: [64]
include:
  - {build: host-release, model: bench, quant: Q8_0, n_ctx: 256, kv: f16, threads: 1,
     affinity: all, flash_attn: auto, load_mode: mmap, cache: cold, n_batch: 64, n_ubatch: 64}
  - {build: host-release, model: bench, quant: Q8_0, n_ctx: 256, kv: f16, threads: 1,
     affinity: all, flash_attn: auto, load_mode: mmap, cache: warm, n_batch: 64, n_ubatch: 64}
models:
  bench: {ladder: bench}
workload: {n_prompt: 16, n_gen: 8}
repetitions: 2
cooldown: {max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}
timeout: {trial_s: 240}
output_check: false
"""


def _fitting_reads_nothing_while_decoding(fitting: pd.DataFrame) -> None:
    """The fitting cell reads (next to) nothing from storage while decoding: the storage speed
    cannot reach it, whatever its tok/s does on a shared CPU. Where its decode was too short for
    two reads of /proc/PID/io inside it (no per-token figure), the whole trial's reads say the
    same: the file read about once, where a paging decode of 8 tokens would read it about 4
    times more (half of it per token, as measured above)."""
    for _, row in fitting.iterrows():
        per_token = row["read_bytes_per_token"]
        if pd.notna(per_token):
            assert per_token < 1 << 20, row[["read_bytes_per_token", "read_bytes"]]
        else:
            assert row["read_bytes"] < 2 * row["model_file_bytes"], row[
                ["read_bytes", "model_file_bytes"]]


def _halving_slows_paging_and_leaves_a_fitting_cell_alone(
        virtual_phones: Any, tmp_path: Path, host_build: Build,
        at_100: dict[tuple[str, str, str, str], pd.DataFrame]) -> None:
    """The F16 and Q8_0 cells again on a phone whose storage reads at 50 MB/s (started
    after the 100 MB/s run: neither slows the other down)."""
    matrix = tmp_path / "halving.yaml"
    matrix.write_text(HALVING)
    (phone,) = virtual_phones(1, profile=SMALL, storage_mb_s=50.0)
    trials = _run(matrix, phone, tmp_path / "r50", host_build)
    assert (trials["outcome"] == "ok").all(), trials[["outcome", "error"]]
    paging = trials.set_index("quant")["paging"]
    assert paging.loc["F16"].all() and not paging.loc["Q8_0"].any()
    fitting = trials[trials["quant"] == "Q8_0"]
    _fitting_reads_nothing_while_decoding(fitting)
    warm = fitting[fitting["cache"] != "cold"]
    assert (warm["cache"] == "warm").all(), warm[["cache", "cache_error"]]
    tg = {(50.0, "F16"): float(trials[trials["quant"] == "F16"]["tg_tps"].median()),
          (50.0, "Q8_0"): float(warm["tg_tps"].median())}
    tg[(100.0, "F16")] = float(at_100[("bench", "F16", "mmap", "cold")]["tg_tps"].median())
    tg[(100.0, "Q8_0")] = float(at_100[("bench", "Q8_0", "mmap", "warm")]["tg_tps"].median())
    assert tg[(50.0, "F16")] <= 0.7 * tg[(100.0, "F16")], tg  # paging: storage-bound
    # fits: unaffected by storage; its speed is CPU-bound, and one pair measured minutes apart
    # on a shared 2-core machine has been seen 0.65 apart (clean clone, 2026-12-05): a sanity
    # bound here, the cause is asserted above
    assert 0.5 <= tg[(50.0, "Q8_0")] / tg[(100.0, "Q8_0")] <= 2.0, tg


def test_the_simulated_memory_model_pages_and_kills_what_the_cgroup_model_does(
        virtual_phones: Any, tmp_path: Path, host_build: Build, bench_ladder: Any,
        moe_ladder: Any) -> None:
    """Where the host has no cgroup v1 (most current distributions), the simulated model stands
    in: it reclaims the clean file pages the phone maps (an mmap'd model's weights) before it
    kills, so the same matrix gives the same outcomes as with cgroup: mapped F16 pages, read in
    it is killed, Q8_0 runs (its storage is not throttled, so no speed is compared here).

    Q8_0's paging label is not compared: the simulated model counts the engine's whole RSS, its
    binary's and the host libraries' text included (about 19 MB), which the cgroup never charges;
    with them Q8_0's load peaks at 146-150 MB on this 128 MB phone while its weights are
    repacked, so some of its file pages go and a short decode may read them back (seen: 2-3 MB
    per token, over the 2% of the file that makes the label).

    The decode is 64 tokens here, not the matrix's 8: the simulated model reclaims when its
    guard (every 20 ms) sees the phone over its limit, where a kernel reclaims at the fault, and
    the mapped F16 decodes at 100-130 tokens/s from memory between two reclaims. Eight tokens
    (70 ms) held too few of the sampler's points for a per-token figure, and the label fell
    back to the trial's total reads, which sat on its threshold (222 and 230 MB against 227 MB:
    one rep of two labelled not paging on a fresh machine). Sixty-four span many reclaims."""
    (phone,) = virtual_phones(1, profile=SMALL, memory_model="simulated")
    assert phone.info.memory_model == "simulated"
    assert "clean file pages are paged out before a kill" in phone.info.memory_note
    matrix = yaml.safe_load(MATRIX.read_text())
    matrix["workload"] = {**matrix["workload"], "n_gen": 64}
    longer = tmp_path / "bigger-than-ram-64.yaml"
    longer.write_text(yaml.safe_dump(matrix))
    cells = _cells(_run(longer, phone, tmp_path / "r", host_build))
    for key in (("bench", "F16", "mmap", "cold"), ("moe", "F16", "mmap", "cold")):
        mapped = cells[key]
        assert (mapped["outcome"] == "ok").all(), (key, mapped[["outcome", "error"]])
        assert mapped["paging"].all() and (mapped["memory_model"] == "simulated").all(), (
            key, mapped[["paging", "read_bytes_per_token", "major_faults"]])
        # measured per token, not inferred from the trial's total
        assert (mapped["read_bytes_per_token"] >= PAGING_SHARE * mapped["model_file_bytes"]
                ).all(), (key, mapped[["read_bytes_per_token", "tg_tps"]])
        assert (mapped["peak_pss_bytes"] < mapped["model_file_bytes"]).all()
    killed = cells[("bench", "F16", "none", "cold")]
    assert (killed["outcome"] == "oom_killed").all(), killed[["outcome", "error"]]
    for key in (("bench", "Q8_0", "mmap", "cold"), ("bench", "Q8_0", "mmap", "warm")):
        fits = cells[key]
        assert (fits["outcome"] == "ok").all(), (key, fits[["outcome", "error"]])
