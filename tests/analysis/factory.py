"""Small stores for the analysis tests: TrialRecord objects written with store.write_part."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner, Result

from harness.cell import Cell
from harness.cli import HarnessGroup
from harness.records import TrialRecord
from harness.store import write_part

START = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)


def cell(**overrides: Any) -> Cell:
    base: dict[str, Any] = dict(
        build="b1", model="tiny", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
        threads=4, affinity="all", flash_attn="auto", mmap=True, n_batch=256, n_ubatch=128,
        n_prompt=32, n_gen=16, n_depth=0,
    )
    base.update(overrides)
    return Cell(**base)


def trial(c: Cell | None = None, *, run_id: str = "run1", serial: str = "SER1", rep: int = 0,
          started_at: datetime = START, **overrides: Any) -> TrialRecord:
    """One ok trial of cell ``c`` on ``serial``; any TrialRecord field can be overridden."""
    c = c or cell()
    record = TrialRecord(
        run_id=run_id, trial_id=f"{run_id}/{serial}/{c.cell_id}/{rep}",
        job_id=f"{serial}/{c.cell_id}", cell_id=c.cell_id, config_id=c.config_id, rep=rep,
        started_at=started_at, wall_s=10.0, device_serial=serial, device_model="Pixel Test",
        device_manufacturer="Google", device_soc="Tensor", device_sdk=34,
        device_ram_bytes=8 << 30, build_id=c.build, build_engine="llama.cpp",
        build_version="1", build_commit="abc1234", build_abi="arm64-v8a", model_name=c.model,
        model_sha256="ab" * 32, quant=c.quant, model_n_params=1_000_000_000,
        model_file_bytes=600_000_000, n_ctx=c.n_ctx, n_prompt=c.n_prompt, n_gen=c.n_gen,
        n_depth=c.n_depth, type_k=c.type_k, type_v=c.type_v, flash_attn=c.flash_attn,
        threads=c.threads, affinity=c.affinity, mmap=c.mmap, n_batch=c.n_batch,
        n_ubatch=c.n_ubatch, outcome="ok", error=None, pp_tps=400.0, tg_tps=20.0,
        ttft_ms=80.0, peak_pss_bytes=1 << 30, peak_rss_bytes=(1 << 30) + (64 << 20),
        peak_swap_bytes=0, vm_hwm_bytes=None, peak_pss_anon_bytes=None,
        peak_pss_file_bytes=None, predicted_peak_bytes=1 << 30, max_temp_c=40.0,
        max_thermal_status=0, throttled=False, cooldown_waited_s=0.0, start_thermal_status=0,
        start_temp_c=35.0, battery_level=80, battery_temp_c=30.0, evidence=None,
        engine_record=None, engine=c.engine, compute_device=c.compute_device,
        n_gpu_layers=c.n_gpu_layers,
    )
    return replace(record, **overrides)


def sample_trials(c: Cell, tg: Iterable[float], **overrides: Any) -> list[TrialRecord]:
    """One trial per value of ``tg`` (pp and peak move with it, so every metric has a sample)."""
    return [
        trial(c, rep=i, tg_tps=float(v), pp_tps=float(v) * 20, **overrides)
        for i, v in enumerate(tg)
    ]


def noisy(rng: np.random.Generator, centre: float, n: int, cv: float = 0.01) -> list[float]:
    return list(centre * rng.lognormal(0.0, cv, n))


def write(root: Path, records: Sequence[TrialRecord], run_id: str = "run1",
          when: datetime | None = None) -> None:
    write_part(root, "trials", list(records), run_id, when=when or START)


def ab_store(root: Path, *, drop: float, seed: int = 1, reps: int = 10,
             devices: Sequence[str] = ("SER1", "SER2"),
             quants: Sequence[str] = ("Q4_K_M", "Q8_0")) -> None:
    """Builds ``base`` and ``cand`` on every device x quant; ``cand`` is ``drop`` slower."""
    rng = np.random.default_rng(seed)
    records: list[TrialRecord] = []
    for serial in devices:
        for quant in quants:
            for build, factor in (("base", 1.0), ("cand", 1.0 - drop)):
                c = cell(build=build, quant=quant)
                for i, v in enumerate(noisy(rng, 20.0 * factor, reps)):
                    records.append(trial(c, serial=serial, rep=i, tg_tps=v,
                                         pp_tps=400 * rng.lognormal(0, 0.01),
                                         peak_pss_bytes=int((1 << 30) * rng.lognormal(0, 0.005))))
    write(root, records)


def run_analysis(*args: str) -> Result:
    """``harness ARGS`` with only the analysis commands registered (compare, nightly, noise ...)."""
    from harness.cli import analysis

    group = HarnessGroup("harness")
    for command in analysis.COMMANDS:
        group.add_command(command)
    return CliRunner().invoke(group, list(args))
