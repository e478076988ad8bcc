"""The results store: schema from records, atomic parts, tolerant reads."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness import store
from harness.records import SampleRecord, TrialRecord


def make_trial(**changes: object) -> TrialRecord:
    values: dict[str, object] = {}
    for field in dataclasses.fields(TrialRecord):
        hint = str(field.type)
        if "None" in hint:
            values[field.name] = None
        elif hint.startswith("str"):
            values[field.name] = f"{field.name}-x"
        elif hint.startswith("int"):
            values[field.name] = 1
        elif hint.startswith("bool"):
            values[field.name] = False
        elif hint.startswith("datetime"):
            values[field.name] = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
        else:
            raise AssertionError(f"no default for {field.name}: {hint}")
    values.update(changes)
    return TrialRecord(**values)  # type: ignore[arg-type]


def test_schema_columns_are_the_record_fields_in_order() -> None:
    for name, record_type in store.TABLES.items():
        fields = [f.name for f in dataclasses.fields(record_type)]
        assert store.SCHEMAS[name].names == fields
        assert store.SCHEMAS[name].metadata[b"harness.schema_version"] == b"16"


def test_nullable_follows_the_annotation() -> None:
    schema = store.SCHEMAS["trials"]
    assert schema.field("run_id").nullable is False
    assert schema.field("tg_tps").nullable is True
    assert schema.field("started_at").type == pa.timestamp("us", tz="UTC")


def test_round_trip_keeps_values_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    trials = [make_trial(trial_id=f"r/j/{i}", rep=i, tg_tps=10.0 + i) for i in range(3)]
    path = store.write_part(tmp_path, "trials", trials, "r1",
                            when=datetime(2026, 11, 29, tzinfo=UTC))
    assert path is not None and path.parent.name == "date=2026-11-29"
    assert not list(tmp_path.rglob("*.tmp"))
    frame = store.read_table(tmp_path, "trials")
    assert list(frame["rep"]) == [0, 1, 2]
    assert list(frame["tg_tps"]) == [10.0, 11.0, 12.0]
    assert store.run_files(tmp_path, "trials", "r1") == [path]
    assert store.run_files(tmp_path, "trials", "r2") == []


def test_empty_write_makes_no_file(tmp_path: Path) -> None:
    assert store.write_part(tmp_path, "samples", [], "r1") is None
    assert store.read_table(tmp_path, "samples").empty


def test_older_part_without_a_column_reads_it_as_null(tmp_path: Path) -> None:
    store.write_part(tmp_path, "samples", [SampleRecord(
        "r1", "t1", 0, 1, 2, 0, None, None, 0, 30.0, 1000, 2000, 80, 30.5, "smaps_rollup")], "r1")
    old = pa.table({"run_id": ["r0"], "trial_id": ["t0"], "t_ms": [5]})
    folder = tmp_path / "samples" / "date=2026-01-01"
    folder.mkdir(parents=True)
    pq.write_table(old, folder / "part-r0-old.parquet")
    frame = store.read_table(tmp_path, "samples").sort_values("run_id")
    assert list(frame["run_id"]) == ["r0", "r1"]
    assert frame["pss_bytes"].isna().tolist() == [True, False]


def test_a_part_with_the_older_accelerator_column_names_reads_them_under_the_new(
        tmp_path: Path) -> None:
    """Schema 15 named the GPU's memory device_*: a part written so reads as accelerator_*."""
    folder = tmp_path / "trials" / "date=2026-12-01"
    folder.mkdir(parents=True)
    schema_15 = {b"harness.schema_version": b"15"}
    old = pa.table({"run_id": ["r0", "r1"], "trial_id": ["t0", "t1"],
                    "device_memory_bytes": [70_000_000, None],
                    "device_memory_source": ["kgsl kernel_max", "unreadable: no kgsl"],
                    "predicted_device_bytes": [71_000_000, 36_000_000]}).replace_schema_metadata(
        schema_15)
    pq.write_table(old, folder / "part-r0-old.parquet")
    samples = tmp_path / "samples" / "date=2026-12-01"
    samples.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["r0"], "trial_id": ["t0"], "t_ms": [5],
                             "device_memory_bytes": [9_000]}).replace_schema_metadata(schema_15),
                   samples / "part-r0-old.parquet")
    trials = store.read_table(tmp_path, "trials").sort_values("trial_id")
    assert trials["accelerator_memory_bytes"].tolist()[0] == 70_000_000
    assert trials["accelerator_memory_bytes"].isna().tolist() == [False, True]
    assert trials["accelerator_memory_source"].tolist() == ["kgsl kernel_max",
                                                            "unreadable: no kgsl"]
    assert trials["predicted_accelerator_bytes"].tolist() == [71_000_000, 36_000_000]
    assert "device_memory_bytes" not in trials
    assert store.read_table(tmp_path, "samples")["accelerator_memory_bytes"].tolist() == [9_000]
    # a read that filters on the current name finds the part's rows under the older one
    picked = store.read_columns(store.part_files(tmp_path, "trials"), "trials",
                                ["trial_id", "predicted_accelerator_bytes"],
                                filters=[("accelerator_memory_source", "==", "kgsl kernel_max")])
    assert picked.to_pylist() == [{"trial_id": "t0", "predicted_accelerator_bytes": 71_000_000}]


def test_corrupt_part_is_skipped_and_recorded(tmp_path: Path) -> None:
    store.write_part(tmp_path, "trials", [make_trial()], "good")
    bad = tmp_path / "trials" / "date=2026-11-29" / "part-bad-1.parquet"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"PAR1 half a file")
    mark = store.skip_mark()
    frame = store.read_table(tmp_path, "trials")
    assert len(frame) == 1
    store.read_table(tmp_path, "trials")  # read twice, named once
    (skipped,) = store.skipped_since(mark)
    assert (skipped.path, skipped.table, skipped.rows) == (bad, "trials", None)
    assert skipped.reason.startswith("unreadable: ")
    assert store.skipped_since(store.skip_mark()) == []
