"""Engines as a matrix axis: llama-bench and llama-cpp-python on the same cells of sim phones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_run_e2e import run_cli  # harness run --json, exit 0 asserted

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main

REPO = Path(__file__).resolve().parents[2]
ENGINES = REPO / "matrices" / "engines.yaml"

pytestmark = pytest.mark.slow


def test_two_engines_on_the_same_cells_are_stored_side_by_side(
    sim_home: Path, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    import llama_cpp

    results = tmp_path / "results"
    summary = run_cli(str(ENGINES), "--devices", "sim:2", "--results", str(results),
                   "--builds", str(host_build.path.parent))
    trials = store.read_table(results, "trials")
    # 2 engines x 2 quants x 3 repetitions x 2 phones
    assert summary["trials_by_outcome"] == {"ok": 24}
    by_engine = trials.groupby("engine")
    assert by_engine.size().to_dict() == {"llama-bench": 12, "llama-cpp-python": 12}
    python = trials[trials["engine"] == "llama-cpp-python"]
    bench = trials[trials["engine"] == "llama-bench"]
    assert set(python["build_id"]) == {"device-python"}
    assert set(python["build_version"]) == {llama_cpp.__version__}  # read on the phone
    assert set(bench["build_id"]) == {host_build.name}
    # the output check: llama-bench's build agrees with the reference; the Python bench has no
    # generator, which is "not checked" with the reason, never a failure
    assert set(bench["output_check"]) == {"match"}
    assert set(python["output_check"]) == {"not_checked"}
    assert python["output_check_detail"].str.contains("no greedy generator").all()
    assert python["valid"].all() and bench["valid"].all()
    # the same configurations: each config_id was measured by both engines on both phones
    pairs = trials.groupby(["device_serial", "config_id"])["engine"].nunique()
    assert (pairs == 2).all() and len(pairs) == 4
    assert (trials["tg_tps"] > 0).all() and (trials["pp_tps"] > 0).all()
    # the interpreter and its libraries are the difference in peak memory, and the predictor
    # knows each engine's own overhead
    assert python["vm_hwm_bytes"].min() > bench["vm_hwm_bytes"].max() + 20 * 2**20
    ratio = (trials["predicted_peak_bytes"] / trials["vm_hwm_bytes"]).groupby(trials["engine"])
    median = ratio.median()  # a 0.2 s llama-bench trial can end between two watcher reads
    assert median.between(0.85, 1.3).all(), median.to_dict()  # 0.90 on a loaded CI run

    # compared like builds: verdicts per device and configuration, both sides named
    compared = CliRunner().invoke(main, [
        "compare", "--results", str(results), "--baseline-engine", "llama-bench",
        "--candidate-engine", "llama-cpp-python", "--metric", "tg_tps,pp_tps", "--json"])
    assert compared.exit_code == 0, compared.output
    doc = json.loads(compared.stdout)
    assert (doc["baseline"], doc["baseline_engine"]) == (host_build.name, "llama-bench")
    assert (doc["candidate"], doc["candidate_engine"]) == ("device-python", "llama-cpp-python")
    assert len(doc["cells"]) == 2 * 2 * 2  # phones x configurations x metrics
    assert sum(doc["verdicts"].values()) == len(doc["cells"])
    # and the report has an Engines section with both engines' medians per configuration
    out = tmp_path / "report.html"
    made = CliRunner().invoke(main, ["report", "--results", str(results), "-o", str(out)])
    assert made.exit_code == 0, made.output
    section = out.read_text().split('<section id="engines">', 1)[1].split("</section>", 1)[0]
    assert "llama-bench" in section and "llama-cpp-python" in section
    rows = section.split("<tr><td>")[1:]
    assert len(rows) == 4 and sum("Q8_0" in r for r in rows) == 2  # phones x configurations
    assert all(r.count(" MiB</td>") == 2 for r in rows)  # each engine's peak, measured


def test_a_phone_without_python_records_llama_cpp_python_cells_as_unsupported(
    sim_home: Path, tmp_path: Path, tiny_ladder: dict[str, Path]
) -> None:
    matrix = tmp_path / "python-only.yaml"
    text = ENGINES.read_text().replace("engine: [llama-bench, llama-cpp-python]",
                                       "engine: [llama-cpp-python]")
    matrix.write_text(text)
    # an arm64 phone: the host's Python cannot stand in for one of its ABI
    summary = run_cli(str(matrix), "--devices", "sim:1:arm64-v8a", "--results",
                   str(tmp_path / "results"), "--builds", str(tmp_path / "no-builds"))
    assert summary["trials_by_outcome"] == {"unsupported": 6}
    trials = store.read_table(tmp_path / "results", "trials")
    serial = summary["devices"][0]["serial"]  # type: ignore[index]
    assert set(trials["error"]) == {
        f"{serial} has no Python for llama-cpp-python: push a Python for Android with "
        "llama-cpp-python to /data/local/tmp/python (docs/engines.md)"}
    assert set(trials["engine"]) == {"llama-cpp-python"}
