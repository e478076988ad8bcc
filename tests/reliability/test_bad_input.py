"""The bad-input corpus (tests/data/bad): every malformed file ends in one clear error line.

Each case names the file it breaks and the words its error must contain (expected.json); the CLI
command that reads that kind of file must exit 2 with exactly one line naming the file and the
problem, never a traceback. GGUF and Parquet cases are binary, so they are made here from a real
tiny model and a real store. A corrupt Parquet part is not an error: it is skipped with a warning.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from harness import store
from harness.cli import main
from harness.testing.synthstore import SynthSpec, write_synthetic_store

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
CASES: dict[str, str] = json.loads((BAD / "expected.json").read_text())


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_one_error_line(result: Result, path: Path, expect: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: "), lines[0]
    assert path.name in lines[0], (path.name, lines[0])
    assert expect in lines[0], (expect, lines[0])


def cases(folder: str) -> list[str]:
    return sorted(name for name in CASES if name.startswith(f"{folder}/"))


def test_the_corpus_is_complete() -> None:
    files = {p.relative_to(BAD).as_posix() for p in BAD.rglob("*") if p.is_file()}
    assert files - {"expected.json", "README.md"} == set(CASES)
    assert len(CASES) + len(GGUF_CASES) + len(PARQUET_CASES) >= 40


@pytest.mark.parametrize("case", cases("matrices"))
def test_bad_matrix_is_one_error_line_in_plan_and_run(case: str, tmp_path: Path) -> None:
    path = BAD / case
    assert_one_error_line(invoke("plan", str(path), "--device", "midrange-8gb"), path,
                          CASES[case])
    assert_one_error_line(invoke("run", str(path), "--devices", "local", "--results",
                                 str(tmp_path / "r")), path, CASES[case])
    assert not (tmp_path / "r" / "trials").exists()


@pytest.mark.parametrize("case", cases("profiles"))
def test_bad_profile_is_one_error_line_in_sim_start(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", "1")  # nothing may start if it got that far
    path = BAD / case
    assert_one_error_line(invoke("sim", "start", "--profile", str(path)), path, CASES[case])
    assert_one_error_line(invoke("plan", str(Path("matrices/smoke.yaml").resolve()),
                                 "--device", str(path)), path, CASES[case])


@pytest.mark.parametrize("case", cases("manifests"))
def test_bad_manifest_is_one_error_line_in_builds(case: str, tmp_path: Path) -> None:
    folder = tmp_path / "builds" / "b"
    folder.mkdir(parents=True)
    shutil.copy(BAD / case, folder / "manifest.json")
    result = invoke("builds", "--builds", str(tmp_path / "builds"))
    assert_one_error_line(result, folder / "manifest.json", CASES[case])


# --- GGUF: made from the real tiny model -------------------------------------------------------

HEADER = struct.Struct("<4sIQQ")


def _gguf_cases(model: bytes) -> dict[str, tuple[bytes, str]]:
    magic, version, n_tensors, n_kv = HEADER.unpack(model[:HEADER.size])
    rest = model[HEADER.size:]
    return {
        "empty": (b"", "truncated GGUF"),
        "short_header": (model[:10], "truncated GGUF"),
        "wrong_magic": (b"GGML" + model[4:], "not a GGUF file"),
        "html_page": (b"<!DOCTYPE html><html>404 Not Found</html>" * 4, "not a GGUF file"),
        "version_99": (HEADER.pack(magic, 99, n_tensors, n_kv) + rest,
                       "unsupported GGUF version 99"),
        "absurd_tensor_count": (HEADER.pack(magic, version, 2**40, n_kv) + rest,
                                "absurd tensor count"),
        "absurd_metadata_count": (HEADER.pack(magic, version, n_tensors, 2**50) + rest,
                                  "absurd metadata count"),
        "truncated_metadata": (model[:4000], "truncated"),
        "truncated_tensor_data": (model[: len(model) * 9 // 10], "truncated"),
    }


GGUF_CASES = list(_gguf_cases(b"GGUF" + bytes(4096)))
MATRIX_WITH_PATH = """name: gguf
axes: {{build: [host-release], model: [m], quant: [Q8_0], n_ctx: [512]}}
models: {{m: {{path: '{path}'}}}}
workload: {{n_prompt: 32, n_gen: 16}}
"""


@pytest.mark.parametrize("case", GGUF_CASES)
def test_bad_gguf_is_one_error_line_in_plan(case: str, tmp_path: Path,
                                            tiny_ladder: dict[str, Path]) -> None:
    data, expect = _gguf_cases(tiny_ladder["Q8_0"].read_bytes())[case]
    model = tmp_path / f"{case}.gguf"
    model.write_bytes(data)
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX_WITH_PATH.format(path=model))
    assert_one_error_line(invoke("plan", str(matrix), "--device", "midrange-8gb"), model,
                          expect)


# --- Parquet parts: skipped with a warning, the rest read ---------------------------------------

PARQUET_CASES = ["random_bytes", "half_written", "empty_file", "wrong_column_type"]


def _bad_part(case: str, good: Path) -> bytes:
    data = good.read_bytes()
    if case == "random_bytes":
        return bytes(range(256)) * 8
    if case == "half_written":
        return data[: len(data) // 2]
    if case == "empty_file":
        return b""
    table = pa.table({"trial_id": pa.array([1, 2]), "tg_tps": pa.array(["fast", "slow"])})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("store")
    summary = write_synthetic_store(root, SynthSpec(devices=1, nights=2, reps=2))
    return root, summary.trials


def _store_with_bad_part(case: str, good_store: tuple[Path, int], tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(good_store[0], root)
    good = store.part_files(root, "trials")[0]
    good.with_name(f"part-broken-{case}.parquet").write_bytes(_bad_part(case, good))
    return root


@pytest.mark.parametrize("case", PARQUET_CASES)
def test_corrupt_parquet_part_is_skipped_and_named(
    case: str, good_store: tuple[Path, int], tmp_path: Path
) -> None:
    root = _store_with_bad_part(case, good_store, tmp_path)
    mark = store.skip_mark()
    trials = store.read_table(root, "trials")
    assert len(trials) == good_store[1]  # every good row, none of the bad part
    assert [p.path.name for p in store.skipped_since(mark)] == [f"part-broken-{case}.parquet"]


@pytest.mark.parametrize("case", [
    "random_bytes", "half_written", "empty_file",
    "wrong_column_type",
])
def test_report_over_a_store_with_a_corrupt_part_still_renders(
    case: str, good_store: tuple[Path, int], tmp_path: Path
) -> None:
    root = _store_with_bad_part(case, good_store, tmp_path)
    result = CliRunner().invoke(main, ["report", "--results", str(root), "-o",
                                       str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert f"part-broken-{case}.parquet" in result.stderr  # named on stderr, and in a banner
    assert f"part-broken-{case}.parquet" in (tmp_path / "r.html").read_text()
