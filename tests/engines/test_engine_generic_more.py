"""The generic engine's richer declarations: streams, captures and derived metrics, summaries,
devices, prompt files, model files, environment, value maps, knob rules, and two real tools
(ONNX Runtime GenAI's model_benchmark, ExecuTorch's llama_main) declared from YAML alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from harness.cell import Cell
from harness.engines.base import TTFT_PROMPT, EngineOutput, Measurement
from harness.engines.derived import ExpressionError, lookup, parse_expression
from harness.engines.generic import GenericEngine
from harness.engines.generic_yaml import engine_from_dict, load_generic_engine
from harness.errors import ConfigError, EngineError

ROOT = Path(__file__).resolve().parents[2]
ORT_YAML = ROOT / "matrices" / "engines" / "ort-genai-model-benchmark.yaml"

CELL = Cell(
    build="b1", model="tiny", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
    threads=4, affinity="all", flash_attn="auto", mmap=True, n_batch=512, n_ubatch=256,
    n_prompt=128, n_gen=64, repetitions=5,
)


def _engine(output: dict[str, Any], **top: Any) -> GenericEngine:
    data = {"name": "t", "argv": ["{binary}", "{model}"], "output": output, **top}
    return engine_from_dict(data, "engines/t.yaml")


@dataclasses.dataclass(frozen=True)
class Stored:
    """A record as the store gives it back: its raw text and its dict."""

    raw: str
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.data)


def _figures(m: Measurement) -> tuple[Any, ...]:
    return (m.rep, m.prompt_tps, m.gen_tps, m.ttft_s, m.aggregate_n)


# ---- ONNX Runtime GenAI model_benchmark ------------------------------------------------------

# Composed from benchmark/c/main.cpp's format strings (WritePerTokenStats, WriteE2EStats and the
# peak working set line): a 5-repetition run of a 128-token prompt and 64 generated tokens.
ORT_OUTPUT = (
    "Batch size: 1, prompt tokens: 128, tokens to generate: 64\n"
    "Prompt processing (time to first token):\n"
    "\tavg (us):       160000\n"
    "\tavg (tokens/s): 800\n"
    "\tp50 (us):       159000\n"
    "\tstddev (us):    2100.5\n"
    "\tn:              5 * 128 token(s)\n"
    "Token generation:\n"
    "\tavg (us):       40000\n"
    "\tavg (tokens/s): 25\n"
    "\tp50 (us):       39900\n"
    "\tstddev (us):    812.25\n"
    "\tn:              315 * 1 token(s)\n"
    "Token sampling:\n"
    "\tavg (us):       110.5\n"
    "\tavg (tokens/s): 9049.77\n"
    "\tp50 (us):       108\n"
    "\tstddev (us):    9.5\n"
    "\tn:              5 * 1 token(s)\n"
    "E2E generation (entire generation loop):\n"
    "\tavg (ms):       2680.3\n"
    "\tp50 (ms):       2679\n"
    "\tstddev (ms):    12.1\n"
    "\tn:              5\n"
    "Peak working set size: 1610612736 bytes (1.50 GB)\n"
)


def test_ort_genai_declaration_loads_from_its_file() -> None:
    engine = load_generic_engine(ORT_YAML)
    assert engine.binary_name == "model_benchmark"
    assert engine.aggregate_only and engine.output_file is None
    assert engine.model_files == ("genai_config.json", "tokenizer.json", "tokenizer_config.json")
    assert engine.argv(CELL, "/d/bin/model_benchmark", "/d/models/phi/model.onnx") == [
        "/d/bin/model_benchmark", "-i", "/d/models/phi", "-e", "cpu", "-l", "128", "-g", "64",
        "-r", "5", "-w", "1",
    ]


def test_ort_genai_summary_is_one_aggregate_measurement() -> None:
    engine = load_generic_engine(ORT_YAML)
    records = engine.parse(EngineOutput(ORT_OUTPUT, stderr="noise"))
    assert len(records) == 1
    data = records[0].as_dict()
    assert data["prompt_tokens"] == 128 and data["generated_tokens"] == 64
    assert data["prompt_stddev_us"] == 2100.5 and data["gen_p50_us"] == 39900
    (m,) = engine.measure(records)
    assert _figures(m) == (0, 800.0, 25.0, pytest.approx(0.16), 5)
    assert m.ttft_definition == TTFT_PROMPT
    assert m.peak_bytes == 1610612736
    assert m.prompt_tps_sd is None  # the tool's spread is of times, not of rates


def test_ort_genai_older_peak_line_and_cut_output() -> None:
    engine = load_generic_engine(ORT_YAML)
    old = ORT_OUTPUT.replace("Peak working set size: 1610612736 bytes (1.50 GB)",
                             "Peak working set size (bytes): 1610612736")
    (m,) = engine.measure(engine.parse(old))
    assert m.peak_bytes == 1610612736
    cut = ORT_OUTPUT[:ORT_OUTPUT.index("Token generation")]
    (m,) = engine.measure(engine.parse(cut))
    assert (m.prompt_tps, m.gen_tps, m.peak_bytes) == (800.0, None, None)
    assert engine.parse("Exception: model folder not found\n") == []


def test_ort_genai_refuses_gpu_sustained_and_unpassed_knobs() -> None:
    engine = load_generic_engine(ORT_YAML)
    assert engine.supports(CELL) is None
    gpu = engine.supports(dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1))
    assert gpu is not None and "no backend for device Vulkan0 (family gpu)" in gpu
    sustained = engine.supports(dataclasses.replace(CELL, sustained_s=60.0))
    assert sustained is not None and "only its summary" in sustained
    changes: list[tuple[dict[str, Any], str]] = [
        ({"type_v": "q8_0"}, "{type_v}"), ({"flash_attn": "on"}, "{flash_attn}"),
        ({"n_depth": 64}, "{n_depth}")]
    for change, word in changes:
        reason = engine.supports(dataclasses.replace(CELL, **change))
        assert reason is not None and word in reason
    with pytest.raises(EngineError, match="Vulkan0"):
        engine.argv(dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1),
                    "/d/b", "/d/m")


# ---- ExecuTorch llama_main: PyTorchObserver line, rates derived from ms timestamps -----------

EXECUTORCH = {
    "format": "jsonl",
    "prefix": "PyTorchObserver ",
    "ttft_definition": "prefill",
    "captures": {
        "prompt_tokens": "prompt_tokens", "generated_tokens": "generated_tokens",
        "load_start": "model_load_start_ms", "load_end": "model_load_end_ms",
        "inference_start": "inference_start_ms", "prompt_eval_end": "prompt_eval_end_ms",
        "first_token": "first_token_ms", "inference_end": "inference_end_ms",
    },
    "prompt_tps": {"expr": "prompt_tokens / (prompt_eval_end - inference_start)", "unit": "ms"},
    "gen_tps": {"expr": "generated_tokens / (inference_end - prompt_eval_end)", "unit": "ms"},
    "ttft": {"expr": "first_token - inference_start", "unit": "ms"},
    "load": {"expr": "load_end - load_start", "unit": "ms"},
}
OBSERVER = {"prompt_tokens": 128, "generated_tokens": 64, "model_load_start_ms": 1000,
            "model_load_end_ms": 2500, "inference_start_ms": 3000, "inference_end_ms": 6400,
            "prompt_eval_end_ms": 3200, "first_token_ms": 3200,
            "aggregate_sampling_time_ms": 40, "SCALING_FACTOR_UNITS_PER_SECOND": 1000}


def test_executorch_observer_line_gives_derived_rates() -> None:
    engine = _engine(EXECUTORCH, argv=["{binary}", "--model_path={model}",
                                       "--tokenizer_path={model_dir}/tokenizer.model",
                                       "--prompt_file={prompt_file}", "--seq_len={n_ctx}"],
                     model_files=["tokenizer.model"])
    text = ("I 00:00:01 executorch:runner.cpp] loading\n"
            "The answer is forty-two.PyTorchObserver " + json.dumps(OBSERVER) + "\n"
            "PyTorchObserver {\"prompt_tokens\": 12")  # a truncated second line
    records = engine.parse(text)
    assert len(records) == 1 and records[0].as_dict()["model_load_end_ms"] == 2500
    (m,) = engine.measure(records)
    assert _figures(m) == (0, pytest.approx(640.0), pytest.approx(20.0), pytest.approx(0.2), None)
    assert m.load_s == pytest.approx(1.5) and m.ttft_definition == "prefill"
    assert engine.wants_prompt_file and engine.model_files == ("tokenizer.model",)
    argv = engine.argv(CELL, "/d/bin/llama_main", "/d/m/llama.pte", prompt_file="/d/t/p.txt")
    assert argv[2:4] == ["--tokenizer_path=/d/m/tokenizer.model", "--prompt_file=/d/t/p.txt"]
    with pytest.raises(EngineError, match="prompt_file"):
        engine.argv(CELL, "/d/bin/llama_main", "/d/m/llama.pte")


def test_per_capture_units_and_a_zero_span_give_no_figure() -> None:
    output = {**EXECUTORCH, "captures": {
        "prompt_tokens": "prompt_tokens",
        "t0": {"key": "inference_start_ms", "unit": "ms"},
        "t1": {"key": "prompt_eval_end_ms", "unit": "ms"}},
        "prompt_tps": {"expr": "prompt_tokens / (t1 - t0)"}, "ttft": {"expr": "t1 - t0"}}
    for key in ("gen_tps", "load"):
        output.pop(key)
    engine = _engine(output)
    (m,) = engine.measure(engine.parse("PyTorchObserver " + json.dumps(OBSERVER)))
    assert (m.prompt_tps, m.ttft_s) == (pytest.approx(640.0), pytest.approx(0.2))
    same = {**OBSERVER, "prompt_eval_end_ms": 3000}
    (m,) = engine.measure(engine.parse("PyTorchObserver " + json.dumps(same)))
    assert (m.prompt_tps, m.ttft_s) == (None, 0.0)


# ---- streams, prefix, key paths, summaries ---------------------------------------------------

def test_streams_read_stderr_both_or_the_tools_file() -> None:
    line = '{"tps": 5}'
    for stream, output in [("stderr", EngineOutput("", line)),
                           ("both", EngineOutput("x", line)),
                           ("file", EngineOutput("", "", line))]:
        extra = {"file": "results.jsonl"} if stream == "file" else {}
        engine = _engine({"format": "jsonl", "stream": stream, "gen_tps": "tps", **extra})
        assert [m.gen_tps for m in engine.measure(engine.parse(output))] == [5.0]
    assert _engine({"format": "jsonl", "stream": "stderr", "gen_tps": "tps"}).parse(line) == []
    engine = _engine({"format": "jsonl", "stream": "file", "file": "out/r.jsonl",
                      "gen_tps": "tps"}, argv=["{binary}", "--log_sink_file={output_file}"])
    assert engine.output_file == "out/r.jsonl"
    assert engine.argv(CELL, "/d/b", "/d/m") == ["/d/b", "--log_sink_file=out/r.jsonl"]
    assert _engine({"format": "jsonl", "gen_tps": "tps"}).output_file is None


def test_jsonl_key_paths_with_list_indices() -> None:
    engine = _engine({"format": "jsonl", "gen_tps": "stats.decode.tps",
                      "prompt_tps": "runs.0.tps", "peak_memory": {"key": "mem.peak",
                                                                  "unit": "MiB"}})
    text = json.dumps({"stats": {"decode": {"tps": 30}}, "runs": [{"tps": 700}],
                       "mem": {"peak": 1.5}})
    (m,) = engine.measure(engine.parse(text))
    assert (m.prompt_tps, m.gen_tps, m.peak_bytes) == (700.0, 30.0, 1572864)
    assert lookup({"a.b": 1, "a": {"b": 2}}, "a.b") == 1
    assert lookup({"r": [1]}, "r.3") is None and lookup({"r": [1, 2]}, "r.-1") == 2


def test_regex_summary_after_repetitions_is_one_aggregate() -> None:
    engine = _engine({"format": "regex", "aggregate": "^(Average|median)", "per_repetition": True,
                      "captures": {"gen_sd": r"tg ± ([0-9.]+)"},
                      "gen_tps": r"tg ([0-9.]+) tok/s", "gen_tps_sd": {"expr": "gen_sd"}})
    assert not engine.aggregate_only  # the YAML says repetitions are printed too
    text = ("run 1: tg 40.0 tok/s\nrun 2: tg 42.0 tok/s\nrun 3: tg 44.0 tok/s\n"
            "Average over 3 runs: tg 42.0 tok/s tg ± 2.0\n")
    got = engine.measure(engine.parse(text))
    assert [(m.rep, m.gen_tps, m.aggregate_n, m.gen_tps_sd) for m in got] == [
        (0, 40.0, None, None), (1, 42.0, None, None), (2, 44.0, None, None),
        (0, 42.0, 3, 2.0)]
    only = engine.measure(engine.parse("median: tg 41.0 tok/s\n"))
    assert [(m.gen_tps, m.aggregate_n) for m in only] == [(41.0, None)]


def test_jsonl_summary_by_key_condition_with_its_own_count() -> None:
    engine = _engine({"format": "jsonl", "aggregate": {"key": "kind", "equals": "summary"},
                      "per_repetition": False, "captures": {"n": "count"},
                      "gen_tps": "tps", "gen_tps_sd": "tps_sd"})
    assert engine.aggregate_only
    assert engine.supports(dataclasses.replace(CELL, sustained_s=30.0)) is not None
    text = '{"kind": "run", "tps": 10}\n{"kind": "summary", "tps": 11, "tps_sd": 1, "count": 7}'
    records = engine.parse(text)
    assert records[1].as_dict()["_aggregate"] is True
    got = [(m.gen_tps, m.aggregate_n, m.gen_tps_sd) for m in engine.measure(records)]
    assert got == [(10.0, None, None), (11.0, 7, 1.0)]
    # records read back from their stored dicts still know the summary
    again = [Stored(r.raw, r.as_dict()) for r in records]
    assert [m.aggregate_n for m in engine.measure(again)] == [None, 7]


# ---- devices, model files, environment, values, knob rules ---------------------------------

def test_devices_map_by_name_then_family() -> None:
    engine = _engine({"format": "jsonl", "gen_tps": "t"}, argv=["{binary}", "-b", "{device}"],
                     devices={"cpu": "cpu", "gpu": "opencl", "Vulkan0": "vulkan"})
    gpu = dataclasses.replace(CELL, n_gpu_layers=-1)
    assert engine.argv(CELL, "/b", "/m")[-1] == "cpu"
    assert engine.argv(dataclasses.replace(gpu, compute_device="Vulkan0"), "/b", "/m")[-1] == \
        "vulkan"
    assert engine.argv(dataclasses.replace(gpu, compute_device="OpenCL0"), "/b", "/m")[-1] == \
        "opencl"
    reason = engine.supports(dataclasses.replace(gpu, compute_device="HTP0"))
    assert reason is not None and "family npu" in reason
    plain = _engine({"format": "jsonl", "gen_tps": "t"})
    reason = plain.supports(dataclasses.replace(gpu, compute_device="Vulkan0"))
    assert reason is not None and "CPU only" in reason


def test_model_files_environment_and_value_maps() -> None:
    engine = _engine(
        {"format": "jsonl", "gen_tps": "t"},
        argv=["{binary}", "--fa={flash_attn}", "--mmap={mmap}", "--mode={load_mode}"],
        model_files=["tokenizer.json", "sub/genai_config.json"],
        env={"LD_LIBRARY_PATH": "{binary_dir}:{model_dir}/lib", "TOOL_LOG": "1"},
        values={"flash_attn": {True: "true", False: "false", "auto": "auto"},
                "mmap": {True: "yes", False: "no"}, "load_mode": {"mmap": "mapped"}})
    assert engine.model_files == ("tokenizer.json", "sub/genai_config.json")
    assert engine.environment("/d/bin/tool", "/d/models/x/m.bin") == {
        "LD_LIBRARY_PATH": "/d/bin:/d/models/x/lib", "TOOL_LOG": "1"}
    cell = dataclasses.replace(CELL, flash_attn="on")
    assert engine.argv(cell, "/b", "/m") == ["/b", "--fa=true", "--mmap=yes", "--mode=mapped"]
    assert engine.argv(dataclasses.replace(CELL, mmap=False), "/b", "/m")[1:3] == [
        "--fa=auto", "--mmap=no"]
    assert not engine.wants_prompt_file


def test_llama_cpp_family_keeps_llama_cpp_rules_others_only_the_context() -> None:
    argv = ["{binary}", "-m", "{model}", "-ctk", "{type_k}", "-ctv", "{type_v}",
            "-fa", "{flash_attn}", "-d", "{n_depth}"]
    quantised_v = dataclasses.replace(CELL, type_v="q8_0", flash_attn="off")
    llama = _engine({"format": "jsonl", "gen_tps": "t"}, argv=argv, family="llama.cpp")
    other = _engine({"format": "jsonl", "gen_tps": "t"}, argv=argv)
    reason = llama.supports(quantised_v)
    assert reason is not None and "needs flash attention" in reason
    assert other.supports(quantised_v) is None  # the argv passes the knobs; its own rules
    auto = dataclasses.replace(CELL, type_v="q8_0")
    assert llama.argv(auto, "/b", "/m")[8] == "on" and other.argv(auto, "/b", "/m")[8] == "auto"
    big = dataclasses.replace(CELL, n_prompt=500)
    assert other.supports(big) is not None and "n_ctx is 512" in (other.supports(big) or "")


def test_unpassed_knobs_are_unsupported_for_other_tools() -> None:
    engine = _engine({"format": "jsonl", "gen_tps": "t"})
    reason = engine.supports(dataclasses.replace(CELL, type_k="q8_0"))
    assert reason == "t's argv has no {type_k}, so type_k q8_0 cannot be asked of it (it runs " \
        "with f16)"
    assert engine.supports(dataclasses.replace(CELL, n_depth=8)) is not None


# ---- expressions and bad declarations --------------------------------------------------------

def test_expressions_allow_arithmetic_only() -> None:
    expr = parse_expression("a / (b - c) * 2 + -d")
    assert expr.names == {"a", "b", "c", "d"}
    assert expr.evaluate({"a": 6, "b": 5, "c": 2, "d": 1}) == 3.0
    assert expr.evaluate({"a": 6, "b": 2, "c": 2, "d": 1}) is None
    assert expr.evaluate({"a": 6}) is None
    for text in ("__import__('os')", "a ** 2", "a.b", "f(a)", "a if b else c", "True", "a;b"):
        with pytest.raises(ExpressionError):
            parse_expression(text)


JSONL = {"format": "jsonl", "gen_tps": "g"}


@pytest.mark.parametrize(
    ("top", "output", "message"),
    [
        ({}, {"stream": "socket"}, "key 'output.stream' must be one of"),
        ({}, {"stream": "file"}, "key 'output.file' is needed"),
        ({}, {"file": "x.txt"}, "key 'output.file' is read only with stream: file"),
        ({}, {"stream": "file", "file": "../x"}, "key 'output.file' must be a relative"),
        ({"argv": ["{binary}", "{output_file}"]}, {}, r"key 'argv' uses \{output_file\}"),
        ({}, {"captures": {"t0": "a"}, "gen_tps": {"expr": "n / (t1 - t0)"}},
         "key 'output.gen_tps.expr' names unknown capture 'n'"),
        ({}, {"gen_tps": {"expr": "g ** 2"}}, "key 'output.gen_tps.expr' may use names"),
        ({}, {"gen_tps": {"key": "g", "expr": "g"}}, "has both key and expr"),
        ({}, {"captures": {"gen_tps": "x"}}, "key 'output.captures.gen_tps' must be a name"),
        ({}, {"captures": {"_x": "x"}}, "key 'output.captures._x' must be a name"),
        ({"argv": ["{binary}", "{prompt_file}"], "prompt_file": False}, {},
         "key 'prompt_file' is false but argv uses"),
        ({"prompt_file": True}, {}, "key 'prompt_file' is true but argv has no"),
        ({"argv": ["{binary}", "{device}"], "devices": {"fpga": "x"}}, {},
         "key 'devices.fpga' is not a device family"),
        ({"argv": ["{binary}", "{device}"]}, {}, "key 'devices' is needed"),
        ({"devices": {"cpu": "cpu"}}, {}, "key 'devices' is declared but argv has no"),
        ({}, {"ttft": {"key": "t", "unit": "min"}}, "key 'output.ttft.unit' must be one of"),
        ({}, {"peak_memory": {"key": "p", "unit": "ms"}}, "key 'output.peak_memory.unit'"),
        ({}, {"captures": {"t": {"key": "t", "unit": "h"}}}, "key 'output.captures.t.unit'"),
        ({"env": {"LD_LIBRARY_PATH": 3}}, {}, "key 'env.LD_LIBRARY_PATH' must be a string"),
        ({"env": {"1BAD": "x"}}, {}, "key 'env.1BAD' is not a valid environment variable"),
        ({"env": {"X": "{model}"}}, {}, r"key 'env.X' uses \{model\}"),
        ({"model_files": ["/etc/passwd"]}, {}, "key 'model_files.0' must be a relative"),
        ({"values": {"flash_attn": {"maybe": "1"}}}, {}, "key 'values.flash_attn' maps"),
        ({"values": {"colour": {"a": "b"}}}, {}, "key 'values.colour' is not a cell field"),
        ({}, {"ttft_definition": "whenever"}, "key 'output.ttft_definition' must be one of"),
        ({}, {"prefix": 3}, "key 'output.prefix' must be a string"),
        ({}, {"aggregate": {"equals": 1}}, "key 'output.aggregate' must be a key path"),
        ({}, {"per_repetition": "yes"}, "key 'output.per_repetition' must be true or false"),
        ({}, {"gen_tps": {"key": "g", "units": "ms"}}, "key 'output.gen_tps.units' is unknown"),
    ],
)
def test_bad_declarations_name_the_file_and_key(
        top: dict[str, Any], output: dict[str, Any], message: str) -> None:
    data = {"name": "e", "argv": ["{binary}"], **top, "output": {**JSONL, **output}}
    with pytest.raises(ConfigError, match=message) as error:
        engine_from_dict(data, "engines/x.yaml")
    assert str(error.value).startswith("engines/x.yaml: key '")


def test_a_bad_regex_aggregate_names_its_key() -> None:
    with pytest.raises(ConfigError, match=r"key 'output\.aggregate' is not a valid regex"):
        engine_from_dict({"name": "e", "argv": ["x"], "output": {
            "format": "regex", "gen_tps": "(x)", "aggregate": "(["}}, "x.yaml")
