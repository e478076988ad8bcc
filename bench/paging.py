"""Figure 11: the planner's storage-bound decode speed against the measured one (issue 29).

A dense model (bench F16, 151 MB) and a mixture of experts (moe F16, 246 MB, 8 experts, 2 per
token, routing independent from token to token) run with mmap and a cold page cache on the
small-RAM virtual phone (devices/virtual/small-ram.yaml) with ``RAM_MB`` free, whose memory the
host kernel enforces and whose own disk reads at 100 MB/s, then on the same phone at 50 MB/s:
four cells that page their weights. Per cell, the plan's ``predicted_paging_tg_tps`` (stored
with every trial) over the median measured tg. Target: every cell within ±35 %.

The phone's storage is limited in reads a second too (``storage.read_iops``), in a UFS 3.1
phone's proportion to its bytes a second (``UFS``'s profile: 100,000 reads/s at 1,500 MB/s, 15 KB
a read): a read pattern that a UFS 3.1 phone's reads a second would hold back is held back here
too. The phone's reads and bytes read from its disk over the run (blkio) give the mean read.

The moe model's expert hit rate (harness.paging_predict) was calibrated on this phone class
with 128, 160 and 200 MB left to the engine. ``RAM_MB`` is 120, outside that range (a 136 MB
phone turned out to hold the dense model's working set: it fitted): every cell is out of
sample.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bench.common import ROOT, Figure, Lab

PROFILE = ROOT / "devices" / "virtual" / "small-ram.yaml"
UFS = ROOT / "devices" / "flagship-16gb.yaml"  # a UFS 3.1 phone: its reads a second per MB/s
RAM_MB = 120
SPEEDS = (100.0, 50.0)
TARGET = 0.35
# --quick: one trial of 8 tokens per cell (was 16). Every token pages the weights in again
# (40-120 MiB a token, 5-20 s a cell at 50-100 MB/s), so generation was ~50 s of the figure's
# ~270 s at 16 tokens. Seen 2026-12-07, 8 against 16 tokens (one run each, load 7-10): bench
# 0.786/0.392 tok/s against 0.784/0.393; moe 2.33/1.20 against 2.18/1.06, its first tokens
# still finding some of the prompt's experts in memory, so its cells read 6-9% faster than the
# plan instead of within 3%: inside the ±35% target, and the reason a full run takes 32 tokens.
N_GEN_QUICK = 8
MATRIX = """
name: paging-figure
axes:
  build: [host-release]
  model: [bench, moe]
  quant: [F16]
  n_ctx: [256]
  kv: [f16]
  threads: [1]
  load_mode: [mmap]
  cache: [cold]
  n_batch: [64]
  n_ubatch: [64]
models:
  bench: {{ladder: bench}}
  moe: {{ladder: moe}}
workload: {{n_prompt: 16, n_gen: {n_gen}}}
repetitions: {reps}
cooldown: {{max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}}
timeout: {{trial_s: 600}}
"""


def cell_rows(trials: pd.DataFrame, speed: float) -> list[dict[str, Any]]:
    """One row per model: prediction, median measured tg and reads per token (pure)."""
    rows = []
    for model, group in trials.groupby("model_name"):
        ok = group[group["outcome"] == "ok"]
        measured = float(ok["tg_tps"].median()) if len(ok) else None
        predicted = group["predicted_paging_tg_tps"].dropna()
        rows.append({
            "model": str(model), "storage_mb_s": speed, "trials": len(group), "ok": len(ok),
            "paging": int(ok["paging"].fillna(False).astype(bool).sum()),
            "measured_tg_tps": measured,
            "predicted_tg_tps": float(predicted.iloc[0]) if len(predicted) else None,
            "read_mib_per_token": (float(ok["read_bytes_per_token"].median()) / 2**20
                                   if ok["read_bytes_per_token"].notna().any() else None)})
    return rows


def figure(rows: list[dict[str, Any]]) -> Figure:
    """The table row: the worst cell's error, and how many cells are within the target."""
    errors = [(r["predicted_tg_tps"] / r["measured_tg_tps"] - 1, r) for r in rows
              if r["predicted_tg_tps"] and r["measured_tg_tps"]]
    name = "11 paging: predicted / measured tg"
    if not errors:
        return Figure(name, None, "%", "-", "within ±35%, ≥ 4 cells", False,
                      "no cell both predicted and measured")
    worst_error, worst = max(errors, key=lambda e: abs(e[0]))
    within = sum(abs(e) <= TARGET for e, _ in errors)
    spread = ", ".join(f"{r['model']}@{r['storage_mb_s']:g}: {100 * e:+.0f}%" for e, r in errors)
    note = (f"{within}/{len(errors)} within; worst {worst['model']} at "
            f"{worst['storage_mb_s']:g} MB/s: {worst['predicted_tg_tps']:.2f} predicted vs "
            f"{worst['measured_tg_tps']:.2f} tok/s measured")
    return Figure(name, 100 * worst_error, "%", spread, "within ±35%, ≥ 4 cells",
                  within == len(errors) >= 4, note)


def read_iops_at(speed: float) -> int:
    """Reads a second for a phone reading ``speed`` MB/s, in ``UFS``'s proportion."""
    from harness.profiles import load_profile_file

    ufs = load_profile_file(UFS)
    if not ufs.storage_read_iops or not ufs.storage_read_mb_s:
        raise SystemExit(f"{UFS}: storage.read_iops and storage.read_mb_s are both needed")
    return round(speed * ufs.storage_read_iops / ufs.storage_read_mb_s)


def _profile(lab: Lab, speed: float) -> Path:
    """The small-RAM phone with reads a second in proportion to ``speed``."""
    data = yaml.safe_load(PROFILE.read_text())
    data["storage"] = {**data["storage"], "read_iops": read_iops_at(speed)}
    path = lab.work / f"small-ram-{speed:g}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _mean_read_kib(phone_dir: str) -> float | None:
    """The phone's mean read from its disk so far (KiB), from its blkio counts."""
    from harness.virtual import cgroups
    from harness.virtual.sandbox import Sandbox

    config = yaml.safe_load((Sandbox(Path(phone_dir)).state / "config.json").read_text())
    groups = cgroups.PhoneCgroups.from_json(config.get("cgroups"))
    counts = cgroups.reads(groups) if groups else None
    return counts[1] / counts[0] / 1024 if counts and counts[0] else None


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    from harness import store
    from harness.device.adb import AdbDevice
    from harness.virtual.control import start_phones, stop_phones

    matrix = lab.work / "paging.yaml"
    matrix.write_text(MATRIX.format(n_gen=N_GEN_QUICK if quick else 32, reps=1 if quick else 3))
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {"ram_mb": RAM_MB, "profile": str(PROFILE)}
    for speed in SPEEDS:  # one phone at a time: neither slows the other's storage or cores
        start = time.monotonic()
        (phone,) = start_phones(str(_profile(lab, speed)), 1, ram_mb=RAM_MB,
                                home=lab.sim_home, abi="x86_64", storage_mb_s=speed)
        try:
            results = lab.work / f"paging-{speed:g}"
            lab.run(matrix, [AdbDevice(phone.serial)], results, reserve_bytes=0)
            rows += cell_rows(store.read_table(results, "trials"), speed)
            data[f"read_iops_{speed:g}"] = phone.storage_read_iops
            data[f"mean_read_kib_{speed:g}"] = _mean_read_kib(phone.path)
        finally:
            stop_phones([phone.serial], home=lab.sim_home)
        data[f"seconds_{speed:g}"] = time.monotonic() - start
    data["cells"] = rows
    return [figure(rows)], data

