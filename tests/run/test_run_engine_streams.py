"""Engines beyond llama.cpp through the whole trial path, on a virtual phone: tools that print on
stderr, write their results to a file on the phone, print only their means (MNN), or print
nothing readable, each stored as its adapter reads it.

The tools here are stand-ins: shell scripts in an imported build that print exactly what the
real tools print (the formats the adapters' own tests are written from) and check the command
line they were given. They test the harness's side (streams, the file on the phone, a model
folder pushed whole, the engine's own figures in the store, a parse error's evidence), not the
engines' speed: tests/engines/test_onnx_genai.py runs a real one.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from test_run_e2e import run_cli  # harness run --json, exit 0 asserted

from harness import store
from harness.artifacts.builds import import_build

pytestmark = pytest.mark.slow

# POSIX sh: the virtual phone runs a script's #! with the host's kernel; a real phone's would
# name /system/bin/sh. Each tool checks the counts it was asked for, as the real ones obey them.
ARGS = """\
for a in "$@"; do
  case $a in
    --benchmark_prefill_tokens=*) P=${a#*=};; --benchmark_decode_tokens=*) G=${a#*=};;
  esac
done
"""
TOOLS = {
    # a tool that logs its figures on stderr (as LiteRT-LM and ExecuTorch do)
    "stderr-bench": """\
        echo "loading $1 in $BENCH_HOME"
        [ -f "$BENCH_HOME/$(basename "$1")" ] || exit 4
        echo "prompt tokens: $(wc -w < "$2")" >&2
        echo "pp=123.50 tok/s" >&2
        echo "tg=45.25 tok/s" >&2
        echo "load took 250 ms" >&2
    """,
    # a tool that writes its results to the file it is given (--log_sink_file and the like)
    "file-bench": """\
        echo "results go to $1"
        echo 'BENCH {"prefill": {"tps": 300.0}, "decode": {"tps": 30.0}, "load_ms": 120}' > "$1"
    """,
    # LiteRT-LM's benchmark block, absl prefix on its first line, on stderr
    "litert_lm_advanced_main": ARGS + textwrap.dedent("""\
        cat >&2 <<EOF
        I0723 17:45:58.123456    4321 litert_lm_lib.cc:418] BenchmarkInfo:
          Init Phases (2):
            - Init Executor: 80.00 ms
            - Init Total: 90.00 ms
        --------------------------------------------------
          Time to first token: 0.10 s
        --------------------------------------------------
          Prefill Turns (Total 1 turns):
            Prefill Turn 1: Processed $P tokens in 80ms duration.
              Prefill Speed: 400.00 tokens/sec.
        --------------------------------------------------
          Decode Turns (Total 1 turns):
            Decode Turn 1: Processed $G tokens in 400ms duration.
              Decode Speed: 40.00 tokens/sec.
        --------------------------------------------------
        I0723 17:45:58.223456    4321 litert_lm_lib.cc:430] Peak system ram usage: 64.5MB.
        EOF
    """),
    # MNN's llm_bench: its markdown table of means and sample sds, on stdout
    "llm_bench": """\
        [ -f "$(dirname "$2")/llm.mnn" ] || { echo "no llm.mnn beside $2" >&2; exit 3; }
        echo "| model | modelSize | backend | threads | precision | test | t/s | loadingTime(s) |"
        echo "| --- | ---: | --- | ---: | --- | --- | ---: | ---: |"
        echo "| mnn-tiny | 1.00 MiB | CPU | 1 | Low | pp32 | 812.50 ± 0.00 | 0.12 ± 0.01 |"
        echo "| mnn-tiny | 1.00 MiB | CPU | 1 | Low | tg16 | 95.25 ± 0.00 | 0.12 ± 0.01 |"
    """,
    # a tool whose output its adapter cannot read
    "garbage-bench": """\
        echo "usage: garbage-bench [options]"
        echo "nothing measured" >&2
    """,
}
ENGINES = {
    "stderr.yaml": """\
        name: stderr-bench
        argv: ["{binary}", "{model}", "{prompt_file}"]
        prompt_file: true
        env: {BENCH_HOME: "{model_dir}"}
        output:
          stream: stderr
          format: regex
          captures: {prompt_tokens: 'prompt tokens: ([0-9]+)'}
          prompt_tps: 'pp=([0-9.]+) tok/s'
          gen_tps: 'tg=([0-9.]+) tok/s'
          load: {pattern: 'load took ([0-9.]+) ms', unit: ms}
    """,
    "file.yaml": """\
        name: file-bench
        argv: ["{binary}", "{output_file}"]
        output:
          stream: file
          file: results.jsonl
          format: jsonl
          prefix: 'BENCH '
          prompt_tps: prefill.tps
          gen_tps: decode.tps
          load: {key: load_ms, unit: ms}
    """,
    "garbage.yaml": """\
        name: garbage-bench
        argv: ["{binary}"]
        output: {format: regex, gen_tps: 'tg=([0-9.]+)'}
    """,
}


def _standins(tmp_path: Path) -> tuple[Path, Path]:
    """(the builds root with the stand-in tools, the folder of the engines' model files)."""
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    for name, body in TOOLS.items():
        script = tools / name
        script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        script.chmod(0o755)
    root = tmp_path / "builds"
    import_build(tools.parent, root, "standins", abi=_host_abi(), engine="stand-in")
    models = tmp_path / "models"
    (models / "mnn-tiny").mkdir(parents=True)
    (models / "mnn-tiny" / "config.json").write_text('{"llm_model": "llm.mnn"}\n')
    (models / "mnn-tiny" / "llm.mnn").write_bytes(b"weights" * 100)
    (models / "litert").mkdir()
    (models / "litert" / "tiny.litertlm").write_bytes(b"litertlm" * 100)
    return root, models


def _host_abi() -> str:
    from harness.virtual.userland import host_abi

    abi = host_abi()
    assert abi is not None, "the virtual phone needs a host of a known ABI"
    return abi


def _matrix(tmp_path: Path, models: Path) -> Path:
    engines = []
    for name, body in ENGINES.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
        engines.append(str(tmp_path / name))
    matrix = tmp_path / "streams.yaml"
    matrix.write_text(textwrap.dedent(f"""\
        name: streams
        axes:
          engine: [{", ".join(engines)}, litert-lm-advanced, mnn-llm-bench]
          build: [standins]
          model: [tiny]
          quant: [Q8_0]
          n_ctx: [512]
          threads: [1]
          affinity: [all]
        models:
          tiny:
            ladder: tiny
            engines:
              mnn-llm-bench: {models}/mnn-tiny/config.json
              litert-lm-advanced: {models}/litert/tiny.litertlm
            converted_from: "stand-in files, not the tiny model's weights"
        workload: {{n_prompt: 32, n_gen: 16}}
        repetitions: 2
        output_check: false
        timeout: {{trial_s: 60}}
        """))
    return matrix


def test_every_stream_and_summary_reaches_the_store(
    sim_home: Path, tmp_path: Path, tiny_ladder: dict[str, Path]
) -> None:
    root, models = _standins(tmp_path)
    results = tmp_path / "results"
    summary = run_cli(str(_matrix(tmp_path, models)), "--devices", "sim:1", "--results",
                      str(results), "--builds", str(root))
    assert summary["trials_by_outcome"] == {"ok": 8, "crashed": 2}
    trials = store.read_table(results, "trials").set_index("engine")
    stderr = trials.loc[str(tmp_path / "stderr.yaml")]
    assert set(stderr["pp_tps"]) == {123.5} and set(stderr["tg_tps"]) == {45.25}
    assert set(stderr["engine_load_ms"]) == {250.0}
    # its prompt file of n_prompt words went with the model, its environment with the launch
    assert {json.loads(r)[0]["prompt_tokens"] for r in stderr["engine_record"]} == {32}
    written = trials.loc[str(tmp_path / "file.yaml")]  # read back from the phone's trial folder
    assert set(written["pp_tps"]) == {300.0} and set(written["tg_tps"]) == {30.0}
    assert set(written["engine_load_ms"]) == {120.0}
    litert = trials.loc["litert-lm-advanced"]
    assert set(litert["pp_tps"]) == {400.0} and set(litert["tg_tps"]) == {40.0}
    assert set(litert["ttft_definition"]) == {"prefill+first_decode"}
    assert set(litert["ttft_ms"].round(3)) == {105.0}  # 80 ms prefill + one mean 25 ms step
    assert set(litert["engine_load_ms"]) == {90.0}
    assert set(litert["engine_peak_bytes"]) == {int(64.5 * 2**20)}
    assert litert["engine_aggregate_n"].isna().all()  # one run per launch, as measured
    assert set(litert["model_file"]) == {"tiny.litertlm"}
    mnn = trials.loc["mnn-llm-bench"]  # its means over the -rep 1 the harness asked for
    assert set(mnn["pp_tps"]) == {812.5} and set(mnn["tg_tps"]) == {95.25}
    assert set(mnn["engine_aggregate_n"]) == {1} and set(mnn["pp_tps_sd"]) == {0.0}
    assert set(mnn["engine_load_ms"]) == {120.0}
    assert set(mnn["model_file"]) == {"config.json"}  # its folder went with it (llm.mnn)
    assert set(mnn["model_converted_from"]) == {"stand-in files, not the tiny model's weights"}
    assert mnn["model_sha256"].nunique() == 1
    assert mnn["model_sha256"].iloc[0] != trials.loc["litert-lm-advanced"]["model_sha256"].iloc[0]
    garbage = trials.loc[str(tmp_path / "garbage.yaml")]
    assert set(garbage["outcome"]) == {"crashed"}
    assert garbage["error"].str.startswith("parse_error: ").all()
    for evidence in garbage["evidence"]:  # the last lines of both streams, labelled
        assert evidence.splitlines() == ["nothing measured", "[stdout]",
                                         "usage: garbage-bench [options]"]
    assert (trials["outcome"] == "ok").sum() == 8 and trials["tg_tps"].notna().sum() == 8
