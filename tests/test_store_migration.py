"""Store schema versions: older parts are migrated on read, newer ones are refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analysis.factory import trial as make_trial

from harness import store
from harness.errors import StoreError


def _rewrite(path: Path, version: str, drop: tuple[str, ...] = ()) -> None:
    table = pq.read_table(path)
    table = table.drop_columns([c for c in drop if c in table.column_names])
    meta = dict(table.schema.metadata or {})
    meta[b"harness.schema_version"] = version.encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def _one_part(tmp_path: Path) -> Path:
    trial = make_trial(engine="llama-cpp-python")
    path = store.write_part(tmp_path, "trials", [trial], "r1")
    assert path is not None
    return path


def test_a_schema_4_part_without_the_engine_column_reads_as_llama_bench(tmp_path: Path) -> None:
    path = _one_part(tmp_path)
    _rewrite(path, "4", drop=("engine",))
    frame = store.read_table(tmp_path, "trials")
    assert frame["engine"].tolist() == ["llama-bench"]
    assert store.part_version(pq.read_table(path)) == 4


def test_a_current_part_keeps_its_engine(tmp_path: Path) -> None:
    _one_part(tmp_path)
    assert store.read_table(tmp_path, "trials")["engine"].tolist() == ["llama-cpp-python"]


def test_a_part_of_a_newer_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = _one_part(tmp_path)
    _rewrite(path, str(store.SCHEMA_VERSION + 1))
    with pytest.raises(StoreError, match=rf"{path.name}.*upgrade harness"):
        store.read_table(tmp_path, "trials")


def test_a_part_with_no_version_is_version_1(tmp_path: Path) -> None:
    table = pa.table({"x": [1]})
    assert store.part_version(table) == 1


OUTPUT_COLUMNS = ("output_check", "output_agreement", "output_agreed_tokens",
                  "output_reference_tokens", "output_reference", "output_check_detail")


def test_a_schema_8_part_reads_the_output_check_columns_as_null(tmp_path: Path) -> None:
    """Schema 9 added the output check; a part written before it was never checked."""
    trial = make_trial(output_check="match", output_agreement=1.0, output_agreed_tokens=16,
                       output_reference_tokens=16, output_reference="ref")
    path = store.write_part(tmp_path, "trials", [trial], "r1")
    assert path is not None
    _rewrite(path, "8", drop=OUTPUT_COLUMNS)
    frame = store.read_table(tmp_path, "trials")
    assert all(frame[column].isna().all() for column in OUTPUT_COLUMNS)
    assert frame["tg_tps"].notna().all()  # the speed is still there


def test_a_current_part_keeps_its_output_check(tmp_path: Path) -> None:
    trial = make_trial(output_check="mismatch", output_agreement=0.25, output_agreed_tokens=4,
                       output_reference_tokens=16, output_reference="ref")
    store.write_part(tmp_path, "trials", [trial], "r1")
    row = store.read_table(tmp_path, "trials").iloc[0]
    assert (row["output_check"], row["output_agreed_tokens"], row["output_reference"]) == (
        "mismatch", 4, "ref")
    assert row["output_agreement"] == pytest.approx(4 / 16)
