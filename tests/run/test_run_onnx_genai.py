"""An engine besides llama.cpp, for real, on a virtual phone: onnxruntime-genai on the tiny
model's weights (exported from its GGUF), beside llama-bench on the GGUF, through the same trial
path, then compared as engines with what differs between them said."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_run_e2e import run_cli  # harness run --json, exit 0 asserted

from harness import store
from harness.artifacts.builds import Build, import_build
from harness.artifacts.onnx_genai import ensure_onnx_genai
from harness.cli import main
from harness.virtual.userland import host_abi

REPO = Path(__file__).resolve().parents[2]
ORT = REPO / "matrices" / "engines" / "onnxruntime-genai.yaml"
BENCH = REPO / "harness" / "engines" / "ort_genai_bench.py"

pytestmark = pytest.mark.slow


def test_onnxruntime_genai_runs_beside_llama_bench_and_is_compared_fairly(
    sim_home: Path, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    builds = host_build.path.parent
    tools = tmp_path / "ort" / "bin"
    tools.mkdir(parents=True)
    shutil.copy(BENCH, tools / BENCH.name)
    abi = host_abi()
    assert abi is not None
    import_build(tools.parent, builds, "ort-genai", abi=abi, engine="onnxruntime-genai",
                 replace=True)
    folder = ensure_onnx_genai(tiny_ladder["F16"], tmp_path / "cache")
    matrix = tmp_path / "ort.yaml"
    matrix.write_text(textwrap.dedent(f"""\
        name: ort
        axes:
          engine: [llama-bench, {ORT}]
          build: [{host_build.name}, ort-genai]
          model: [tiny]
          quant: [F16]
          n_ctx: [512]
          threads: [1]
          affinity: [all]
        models:
          tiny:
            ladder: tiny
            engines:
              {ORT}: {folder / "model.onnx"}
            converted_from: "harness-tiny F16 GGUF, as F32 (harness models onnx)"
        exclude:
          - {{engine: llama-bench, build: ort-genai}}
          - {{engine: {ORT}, build: {host_build.name}}}
        workload: {{n_prompt: 32, n_gen: 16}}
        repetitions: 3
        output_check: false
        timeout: {{trial_s: 120}}
        """))
    results = tmp_path / "results"
    summary = run_cli(str(matrix), "--devices", "sim:1", "--results", str(results),
                      "--builds", str(builds))
    assert summary["trials_by_outcome"] == {"ok": 6}
    trials = store.read_table(results, "trials")
    ort = trials[trials["engine"] == str(ORT)]
    assert len(ort) == 3 and (ort["tg_tps"] > 0).all() and (ort["pp_tps"] > 0).all()
    assert set(ort["build_id"]) == {"ort-genai"} and set(ort["model_file"]) == {"model.onnx"}
    assert set(ort["ttft_definition"]) == {"prefill"} and (ort["engine_load_ms"] > 0).all()
    for text in ort["engine_record"]:  # the work it reports is the cell's: 32 in, 16 out
        (record,) = json.loads(text)
        assert (record["prompt_tokens"], record["generated_tokens"]) == (32, 16)
        assert record["engine"] == "onnxruntime-genai" and record["n_threads"] == 1
    # its memory is the phone's reading of a real process: the interpreter, onnxruntime, model
    assert (ort["vm_hwm_bytes"] > 50 * 2**20).all()

    compared = CliRunner().invoke(main, [
        "compare", "--results", str(results), "--baseline-engine", "llama-bench",
        "--candidate-engine", str(ORT), "--metric", "tg_tps"])
    assert compared.exit_code == 0, compared.output
    said = [line for line in compared.output.splitlines() if line.startswith("not the same")]
    assert len(said) == 1 and "model files differ on 1 of 1 configurations" in said[0]
    assert "ran model.onnx (made from harness-tiny F16 GGUF, as F32" in said[0]
