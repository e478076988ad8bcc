"""Trial rows are made one way: identity, the cell's columns, typed parts and the measurements."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from harness.cell import Cell
from harness.records import (
    OUTCOMES,
    BuildMeta,
    DeviceMeta,
    ModelMeta,
    Outcome,
    TrialIds,
    TrialRecord,
    new_trial,
)
from harness.run.order import TrialSpec

CELL = Cell(build="b1", model="tiny", quant="Q4_0", n_ctx=512, type_k="f16", type_v="q8_0",
            threads=4, affinity="big", flash_attn="on", mmap=True, n_batch=512, n_ubatch=128,
            n_prompt=64, n_gen=32, n_depth=8, swa_full=True)
WHEN = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_outcomes_serialise_to_their_strings() -> None:
    assert Outcome.OK == "ok" and str(Outcome.OOM_KILLED) == "oom_killed"
    assert tuple(o.value for o in Outcome) == OUTCOMES
    assert OUTCOMES[:3] == ("ok", "oom_killed", "crashed")
    assert json.dumps({"o": Outcome.TIMEOUT}) == '{"o": "timeout"}'


def test_a_trial_takes_its_cell_columns_from_the_cell_and_the_rest_from_the_parts() -> None:
    spec = TrialSpec("run1", "SER1", CELL, 2)
    trial = new_trial(spec, CELL, Outcome.OK, started_at=WHEN,
                      device=DeviceMeta(model="Pixel 8", sdk=34, ram_bytes=8 << 30,
                                        abi="arm64-v8a", cpu_emulation="qemu-aarch64"),
                      build=BuildMeta(engine="llama.cpp", version="b4000", commit="abc",
                                      abi="arm64-v8a"),
                      model=ModelMeta(sha256="ab" * 32, n_params=7, file_bytes=9),
                      affinity="0xf0", tg_tps=12.5)
    assert (trial.run_id, trial.trial_id, trial.job_id, trial.rep) == (
        "run1", spec.trial_id, spec.job_id, 2)
    assert (trial.cell_id, trial.config_id, trial.build_id, trial.model_name, trial.quant) == (
        CELL.cell_id, CELL.config_id, "b1", "tiny", "Q4_0")
    assert (trial.n_ctx, trial.type_v, trial.n_depth, trial.engine) == (
        512, "q8_0", 8, CELL.engine)
    assert trial.affinity == "0xf0"  # measured keywords override the cell's
    assert (trial.device_serial, trial.device_model, trial.device_sdk, trial.device_abi,
            trial.cpu_emulation) == ("SER1", "Pixel 8", 34, "arm64-v8a", "qemu-aarch64")
    assert (trial.build_engine, trial.build_version, trial.build_commit) == (
        "llama.cpp", "b4000", "abc")
    assert (trial.model_sha256, trial.model_n_params, trial.model_file_bytes) == (
        "ab" * 32, 7, 9)
    assert trial.outcome == "ok" and type(trial.outcome) is str
    assert trial.tg_tps == 12.5 and trial.pp_tps is None and trial.throttled is False
    assert trial.swa_full is True  # every knob of the configuration comes from the cell


def test_unknown_parts_are_null_and_an_unknown_outcome_is_refused() -> None:
    ids = TrialIds(run_id="r", trial_id="r/x/0", job_id="x", serial="x", rep=0)
    trial = new_trial(ids, CELL, "skipped_infeasible", started_at=WHEN)
    nulls = ["device_model", "device_ram_bytes", "build_engine", "build_abi", "model_sha256",
             "wall_s", "error", "peak_pss_bytes", "device_abi"]
    assert all(getattr(trial, name) is None for name in nulls)
    assert isinstance(trial, TrialRecord) and dataclasses.replace(trial) == trial
    with pytest.raises(ValueError):
        new_trial(ids, CELL, "exploded")
