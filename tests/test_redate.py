"""``harness.testing.redate.move_run``: a stored run moved to another night, whole."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.testing.redate import move_run
from harness.testing.synthstore import SynthSpec, write_synthetic_store


def test_a_run_moves_with_its_samples_and_meta_and_keeps_its_time_of_day(
        tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_synthetic_store(root, SynthSpec(devices=1, nights=2, reps=2, quants=("Q4_0",),
                                          kv_types=("f16",)))
    run_id = "night-20260105"
    before = pd.read_parquet(next((root / "trials").glob(f"date=*/part-{run_id}-*.parquet")))
    samples_before = len(pd.read_parquet(
        next((root / "samples").glob(f"date=*/part-{run_id}-*.parquet"))))
    (root / "runs").mkdir()
    (root / "runs" / f"{run_id}.json").write_text(json.dumps(
        {"run_id": run_id, "started_at": "2026-01-05T18:00:00+00:00",
         "sessions": ["2026-01-05T18:00:00+00:00"]}))

    assert move_run(root, run_id, date(2026, 3, 1)) == 55
    moved = list((root / "trials").glob(f"date=*/part-{run_id}-*.parquet"))
    assert [p.parent.name for p in moved] == ["date=2026-03-01"]
    after = pd.read_parquet(moved[0])
    assert (after["started_at"] - before["started_at"]).dt.days.unique().tolist() == [55]
    pd.testing.assert_series_equal(after["tg_tps"], before["tg_tps"])  # measurements untouched
    samples = list((root / "samples").glob(f"date=*/part-{run_id}-*.parquet"))
    assert [p.parent.name for p in samples] == ["date=2026-03-01"]
    assert pq.read_metadata(samples[0]).num_rows == samples_before
    assert not (root / "trials" / "date=2026-01-05").exists()  # emptied partition removed
    assert (root / "trials" / "date=2026-01-06").is_dir()  # the other run stays
    meta = json.loads((root / "runs" / f"{run_id}.json").read_text())
    assert datetime.fromisoformat(meta["started_at"]) == datetime.fromisoformat(
        "2026-03-01T18:00:00+00:00")
    assert move_run(root, run_id, date(2026, 3, 1)) == 0
    with pytest.raises(ValueError, match="no trials of run nope"):
        move_run(root, "nope", date(2026, 3, 1))
