"""Export to llama-bench's schema, import from it, and llama.cpp's own script reading the export."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.importing import model_of, quant_of, to_trials
from harness.analysis.interop import (
    FIELD_NAMES,
    build_identifiers,
    export,
    export_records,
    exported_rows,
    read_llama_bench,
)
from harness.errors import ConfigError
from harness.store import read_table, write_part

from .factory import cell, run_analysis, trial, write

KEY_PROPERTIES = (  # compare-llama-bench.py joins baseline and candidate on all of these
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "n_cpu_moe", "tensor_buft_overrides",
    "model_filename", "model_type", "n_batch", "n_ubatch", "embeddings", "cpu_mask", "cpu_strict",
    "poll", "n_threads", "type_k", "type_v", "load_mode", "no_kv_offload", "split_mode",
    "main_gpu", "tensor_split", "flash_attn", "n_prompt", "n_gen", "n_depth", "fit_target",
    "fit_min_ctx",
)


def test_an_ok_trial_becomes_a_prompt_and_a_generation_test(tmp_path: Path) -> None:
    write(tmp_path, [trial(tg_tps=20.0, pp_tps=400.0),
                     trial(rep=1, outcome="oom_killed", tg_tps=None, pp_tps=None)])
    records = export_records(read_table(tmp_path, "trials"))
    assert [(r["n_prompt"], r["n_gen"], r["avg_ts"]) for r in records] == [
        (32, 0, 400.0), (0, 16, 20.0)]
    assert records[1]["avg_ns"] == 800_000_000  # 16 tokens at 20 t/s
    for record in records:
        assert all(record[k] is not None for k in KEY_PROPERTIES)
        assert record["build_commit"] == "abc1234" and record["harness_n_ctx"] == 512
        assert record["harness_build_id"] == "b1"


def test_a_stored_engine_record_is_exported_as_reported(tmp_path: Path) -> None:
    raw = [{"build_commit": "deadbee", "cpu_info": "Cortex-X3", "model_type": "llama ?B Q4_K",
            "n_prompt": 32, "n_gen": 0, "avg_ts": 123.0, "samples_ts": [123.0]}]
    write(tmp_path, [trial(engine_record=json.dumps(raw))])
    frame = read_table(tmp_path, "trials")
    (record,) = export_records(frame)  # b1's commit, which no other build has
    assert (record["cpu_info"], record["avg_ts"], record["build_commit"]) == (
        "Cortex-X3", 123.0, "abc1234")
    assert export_records(frame, build_key="id")[0]["build_commit"] == "b1"
    assert record["gpu_info"] == ""  # missing keys are filled, never null
    (by_commit,) = export_records(frame, build_key="commit")
    assert by_commit["build_commit"] == "abc1234"


def test_sql_export_has_llama_benchs_table_and_every_field(tmp_path: Path) -> None:
    write(tmp_path, [trial()])
    count = export(read_table(tmp_path, "trials"), "llama-bench-sql", tmp_path / "o.sqlite")
    connection = sqlite3.connect(tmp_path / "o.sqlite")
    columns = [row[1] for row in connection.execute("PRAGMA table_info(llama_bench)")]
    rows = connection.execute("SELECT COUNT(*) FROM llama_bench").fetchone()[0]
    connection.close()
    assert tuple(columns) == FIELD_NAMES and rows == count == 2


def test_export_of_an_unknown_run_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path, [trial()])
    with pytest.raises(ConfigError, match="--run 'nope'"):
        export(read_table(tmp_path, "trials"), "llama-bench-jsonl", tmp_path / "o", run_id="nope")


@pytest.mark.parametrize("fmt", ["llama-bench-jsonl", "llama-bench-sql"])
def test_export_then_import_round_trips_the_measurements(tmp_path: Path, fmt: str) -> None:
    c = cell(n_ctx=2048)
    write(tmp_path / "a", [trial(c, rep=i, tg_tps=20.0 + i, pp_tps=400.0 + i) for i in range(3)])
    export(read_table(tmp_path / "a", "trials"), fmt, tmp_path / "x")
    trials = to_trials(read_llama_bench(tmp_path / "x"), run_id="imp", device="laptop")
    assert sorted((t.tg_tps, t.pp_tps) for t in trials) == [(20.0, 400.0), (21.0, 401.0),
                                                            (22.0, 402.0)]
    first = trials[0]
    # JSONL carries the harness build id; SQL has llama-bench's columns only: b1's commit
    build = "b1" if fmt == "llama-bench-jsonl" else "abc1234"
    assert (first.device_serial, first.build_id, first.model_name, first.quant) == (
        "laptop", build, "tiny", "Q4_K_M")
    assert (first.outcome, first.n_prompt, first.n_gen, first.threads) == ("ok", 32, 16, 4)
    if fmt == "llama-bench-jsonl":
        assert first.n_ctx == 2048  # the harness extras survive in JSONL only


def test_llama_bench_jsonl_repetitions_become_trials() -> None:
    common = {"build_commit": "abc", "model_filename": "/m/llama-7b-Q4_0.gguf",
              "model_type": "llama 7B Q4_0", "n_threads": 8, "type_k": "f16", "type_v": "f16",
              "n_depth": 0, "n_batch": 2048, "n_ubatch": 512, "flash_attn": 0}
    records = [
        {**common, "n_prompt": 512, "n_gen": 0, "avg_ts": 100.0, "samples_ts": [99.0, 101.0],
         "samples_ns": [5_171_717_171, 5_069_306_930]},
        {**common, "n_prompt": 0, "n_gen": 128, "avg_ts": 10.0, "samples_ts": [9.5, 10.5]},
    ]
    trials = to_trials(records, run_id="r")
    assert [(t.pp_tps, t.tg_tps) for t in trials] == [(99.0, 9.5), (101.0, 10.5)]
    assert trials[0].ttft_ms == pytest.approx(5171.717171)
    assert (trials[0].device_serial, trials[0].flash_attn, trials[0].model_name) == (
        "imported", "off", "llama-7b")
    assert len({t.trial_id for t in trials}) == 2


@pytest.mark.parametrize(("record", "quant"), [
    ({"model_filename": "qwen2.5-1.5b-q4_k_m.gguf"}, "Q4_K_M"),
    ({"model_type": "llama 7B Q4_K - Medium"}, "Q4_K_M"),
    ({"model_type": "qwen2 1.5B F16"}, "F16"),
    ({"model_type": "mystery"}, "unknown"),
])
def test_quant_is_read_from_the_file_name_or_model_type(record: dict, quant: str) -> None:
    assert quant_of(record) == quant


def test_model_name_drops_the_quant_suffix() -> None:
    assert model_of({"model_filename": "/x/qwen2.5-1.5b-Q8_0.gguf"}) == "qwen2.5-1.5b"


def test_sql_text_as_llama_bench_prints_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bench.sql"
    path.write_text(
        "CREATE TABLE IF NOT EXISTS llama_bench (\n  build_commit TEXT,\n  n_prompt INTEGER,\n"
        "  n_gen INTEGER,\n  avg_ts REAL\n);\n\n"
        "INSERT INTO llama_bench (build_commit, n_prompt, n_gen, avg_ts) "
        "VALUES ('abc', '0', '128', '12.5');\n")
    assert read_llama_bench(path) == [
        {"build_commit": "abc", "n_prompt": 0, "n_gen": 128, "avg_ts": 12.5}]


def test_a_file_in_no_known_format_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(ConfigError, match="not llama-bench JSONL, JSON, SQL or SQLite"):
        read_llama_bench(path)


def _compare_script() -> Path:
    from harness.artifacts.llama_source import cache_root

    found = sorted((cache_root() / "src").glob("llama.cpp-*/scripts/compare-llama-bench.py"))
    if not found:
        pytest.skip("vendored llama.cpp source absent: run scripts/llama_wheel.py --sdist")
    return found[-1]


def _script_python() -> str:
    """compare-llama-bench.py imports GitPython and tabulate, which the project does not need;
    HARNESS_COMPARE_PYTHON may name an interpreter that has them."""
    python = os.environ.get("HARNESS_COMPARE_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import git, tabulate"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: compare-llama-bench.py needs GitPython and tabulate, "
                    f"absent from {python}; set HARNESS_COMPARE_PYTHON to a python that has them")
    return python


@pytest.mark.parametrize(("fmt", "name", "tool"), [
    ("llama-bench-sql", "bench.sqlite", []),
    ("llama-bench-jsonl", "bench.jsonl", ["-t", "llama-bench"]),  # the script needs -t for JSONL
])
def test_llama_cpps_compare_script_reads_the_export(tmp_path: Path, fmt: str, name: str,
                                                    tool: list[str]) -> None:
    """Three builds whose names differ in length, as the demo's store has: the script is given
    the identifiers the export printed, for every pair, and never truncates them."""
    script, python = _compare_script(), _script_python()
    builds = {"host-release": ("0c1e5701", 1.0), "host-slow": ("0c1e5701", 0.25),
              "device-python": (None, 0.9)}
    records = [trial(cell(build=build), rep=rep, build_commit=commit, tg_tps=20.0 * factor,
                     pp_tps=400.0 * factor)
               for build, (commit, factor) in builds.items() for rep in range(3)]
    write(tmp_path / "store", records)
    write_part(tmp_path / "store", "trials", [trial(outcome="crashed", tg_tps=None)], "other")
    trials = read_table(tmp_path / "store", "trials")
    export(trials, fmt, tmp_path / name)
    names = {b: n.identifier for b, n in build_identifiers(exported_rows(trials)).items()}
    assert {len(n) for n in names.values()} == {7} and len(set(names.values())) == 3
    for base, cand in (("host-release", "host-slow"), ("host-slow", "device-python")):
        result = subprocess.run([python, str(script), *tool, "-i", name, "-b", names[base],
                                 "-c", names[cand]], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "differing lengths" not in result.stderr, result.stderr
        assert f"t/s {names[base]}" in result.stdout and f"t/s {names[cand]}" in result.stdout
        assert "tg16" in result.stdout and "pp32" in result.stdout


def test_build_identifiers_are_commits_where_unshared_else_hashes_all_one_length() -> None:
    frame = pd.DataFrame({
        "build_id": ["host-release", "host-slow", "nightly", "py", "nightly"],
        "build_commit": ["0C1E5701aa", "0c1e5701bb", "fa11ed9", None, "fa11ed9"]})
    found = build_identifiers(frame)
    assert found["nightly"].identifier == "fa11ed9" and found["nightly"].source == "commit"
    # one commit, two builds (a release and its slowed copy): both hashed, so neither claims it
    for build in ("host-release", "host-slow", "py"):
        assert found[build].source.startswith("a hash of the build id"), found[build]
        assert found[build].identifier != "0c1e570"
    assert "shared with another build" in found["host-slow"].source
    assert "not known" in found["py"].source
    assert {len(f.identifier) for f in found.values()} == {7}
    assert len({f.identifier for f in found.values()}) == 4
    assert build_identifiers(frame) == found  # the same store, the same names


def test_export_command_prints_each_builds_identifier(tmp_path: Path) -> None:
    write(tmp_path / "s", [trial(cell(build="host-release")),
                           trial(cell(build="host-slow"), build_commit=None)])
    result = run_analysis("export", "--format", "llama-bench-sql", "--results",
                          str(tmp_path / "s"), "-o", str(tmp_path / "x.sqlite"))
    assert result.exit_code == 0, result.output
    assert "build host-release -> abc1234 (commit)" in result.output
    assert "build host-slow -> " in result.output and "its commit is not known" in result.output


@pytest.mark.parametrize("mode", ["dio", "mlock", "mmap+mlock", "none"])
def test_the_export_says_the_load_mode_the_engine_was_asked(tmp_path: Path, mode: str) -> None:
    mapped = mode == "mmap+mlock"
    asked = cell(mmap=mapped, load_mode=mode)
    write(tmp_path, [trial(asked, mmap=mapped, load_mode=asked.resolved_load_mode)])
    records = export_records(read_table(tmp_path, "trials"))
    assert [r["load_mode"] for r in records] == [mode, mode]


def test_a_store_from_before_load_mode_exports_what_mmap_said(tmp_path: Path) -> None:
    write(tmp_path, [trial(cell(mmap=False), mmap=False, load_mode=None)])
    assert {r["load_mode"] for r in export_records(read_table(tmp_path, "trials"))} == {"none"}


def test_the_export_says_the_backends_of_the_build(tmp_path: Path) -> None:
    gpu = cell(compute_device="Vulkan0", n_gpu_layers=-1)
    write(tmp_path, [trial(gpu, compute_device="Vulkan0", n_gpu_layers=-1),
                     trial(cell(build="b2"), build_id="b2", build_commit="def5678")])
    frame = read_table(tmp_path, "trials")
    known = export_records(frame, builds={"b1": ("vulkan",), "b2": ("opencl", "hexagon")})
    assert {(r["harness_build_id"], r["backends"]) for r in known} == {
        ("b1", "Vulkan"), ("b2", "OpenCL,HTP")}
    # builds not at hand: the device a trial ran on names its build's backend, a CPU trial CPU
    unknown = export_records(frame)
    assert {(r["harness_build_id"], r["backends"]) for r in unknown} == {
        ("b1", "Vulkan"), ("b2", "CPU")}


def test_export_command_reads_the_backends_from_the_builds_manifests(tmp_path: Path) -> None:
    from harness.artifacts.builds import write_build

    tool = tmp_path / "llama-bench"
    tool.write_text("#!/bin/sh\n")
    write_build(tmp_path / "builds", "b1", {"bin/llama-bench": tool}, engine="llama.cpp",
                abi="arm64-v8a", version="1", backends=("vulkan",))
    write(tmp_path / "s", [trial()])  # a CPU trial of a build with Vulkan compiled in
    out = tmp_path / "x.jsonl"
    result = run_analysis("export", "--format", "llama-bench-jsonl", "--results",
                          str(tmp_path / "s"), "--builds", str(tmp_path / "builds"), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert {json.loads(line)["backends"] for line in out.read_text().splitlines()} == {"Vulkan"}
