"""The YAML-declared generic engine: loading with clear errors, argv templates, output mapping.

Most outputs are a made-up tool's; one is llama.cpp main's timings as a user's run printed them
(tests/engines/data/llama_cpp_main_timings_issue34.txt, its source on its first line)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cell import Cell
from harness.engines import get_engine
from harness.engines.base import EngineOutput
from harness.engines.generic_yaml import engine_from_dict, load_generic_engine
from harness.errors import ConfigError

CELL = Cell(
    build="toy-1", model="tiny", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
    threads=4, affinity="all", flash_attn="auto", mmap=False, n_batch=512, n_ubatch=256,
    n_prompt=64, n_gen=32, repetitions=2,
)

# A made-up tool: one line per run with its prompt time and both rates.
TOY_YAML = """\
name: toy-bench
argv: ["{binary}", "{model}", "-t", "{threads}", "-p", "{n_prompt}", "-n", "{n_gen}",
       "--mmap={mmap}", "-r", "{repetitions}"]
supports:
  type_k: [f16]
  affinity: [all]
output:
  format: regex
  prompt_tps: 'pp ([0-9.]+) tok/s'
  gen_tps: 'tg ([0-9.]+) tok/s'
  ttft: {pattern: 'prompt took ([0-9.]+) ms', scale: 0.001}
"""

TOY_OUTPUT = """\
loading ... ok
run 1: prompt took 50.0 ms | pp 1280.0 tok/s | tg 40.5 tok/s
run 2: prompt took 40.0 ms | pp 1600.0 tok/s | tg 42.0 tok/s
"""


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_YAML)
    return path


def test_argv_template_renders_cell_fields_and_booleans_as_digits(toy: Path) -> None:
    engine = get_engine(str(toy))
    assert engine.name == "toy-bench"
    assert engine.argv(CELL, "/d/toy-bench", "/d/m.bin") == [
        "/d/toy-bench", "/d/m.bin", "-t", "4", "-p", "64", "-n", "32", "--mmap=0", "-r", "2",
    ]


def test_supports_lists_the_allowed_values(toy: Path) -> None:
    engine = load_generic_engine(toy)
    reason = engine.supports(dataclasses.replace(CELL, type_k="q8_0"))
    assert reason == "toy-bench supports type_k in ['f16'], not 'q8_0'"
    assert engine.supports(CELL) is None


def test_regex_output_gives_one_measurement_per_match_scaled(toy: Path) -> None:
    engine = load_generic_engine(toy)
    records = engine.parse(TOY_OUTPUT)
    assert len(records) == 2
    assert "tg 40.5" in records[0].raw
    got = [(m.rep, m.prompt_tps, m.gen_tps, m.ttft_s) for m in engine.measure(records)]
    assert got == [(0, 1280.0, 40.5, 0.05), (1, 1600.0, 42.0, 0.04)]


def test_jsonl_output_maps_engine_keys_and_skips_a_truncated_line() -> None:
    engine = engine_from_dict(
        {
            "name": "et-runner",
            "argv": ["{binary}", "--model", "{model}"],
            "output": {"format": "jsonl", "prompt_tps": "prefill_tps", "gen_tps": "decode_tps",
                       "ttft": {"key": "ttft_ms", "scale": 0.001}},
        },
        "inline",
    )
    text = '{"prefill_tps": 900, "decode_tps": 30, "ttft_ms": 120, "rss": 5}\n{"prefill_tps": 9'
    records = engine.parse(text)
    assert records[0].as_dict()["rss"] == 5
    (measurement,) = engine.measure(records)
    assert (measurement.prompt_tps, measurement.gen_tps, measurement.ttft_s) == (900.0, 30.0, 0.12)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"argv": ["x"], "output": {"format": "jsonl", "gen_tps": "g"}}, "key 'name'"),
        ({"name": "e", "argv": [], "output": {"format": "jsonl"}}, "key 'argv'"),
        ({"name": "e", "argv": ["{binray}"], "output": {"format": "jsonl", "gen_tps": "g"}},
         r"uses \{binray\}"),
        ({"name": "e", "argv": ["x"], "output": {"format": "xml", "gen_tps": "g"}},
         "key 'output.format'"),
        ({"name": "e", "argv": ["x"], "output": {"format": "regex", "gen_tps": "no group"}},
         "exactly one"),
        ({"name": "e", "argv": ["x"], "output": {"format": "regex", "gen_tps": "(["}},
         "not a valid regex"),
        ({"name": "e", "argv": ["x"], "output": {"format": "jsonl", "speed": "s"}},
         "'output.speed' is unknown"),
        ({"name": "e", "argv": ["x"], "output": {"format": "jsonl"}}, "maps none of"),
        ({"name": "e", "argv": ["x"], "output": {"format": "jsonl", "gen_tps": "g"},
          "supports": {"colour": ["red"]}}, "'supports.colour' is not a cell field"),
    ],
)
def test_bad_declarations_name_the_file_and_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        engine_from_dict(data, "engines/x.yaml")
    assert str(error.value).startswith("engines/x.yaml: ")


def test_unknown_engine_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown engine 'mlc'"):
        get_engine("mlc")


def test_load_mode_and_cache_need_the_placeholders_that_honour_them(
        toy: Path, tmp_path: Path) -> None:
    engine = load_generic_engine(toy)  # passes {model}, but no {load_mode}
    assert engine.supports(dataclasses.replace(CELL, cache="cold")) is None
    reason = engine.supports(dataclasses.replace(CELL, load_mode="dio"))
    assert reason is not None and "no {load_mode}" in reason
    modes = tmp_path / "modes.yaml"
    modes.write_text(TOY_YAML.replace('"--mmap={mmap}"', '"--load={load_mode}"')
                     .replace('"{model}", ', '"--config=m.json", '))
    engine = load_generic_engine(modes)
    dio = dataclasses.replace(CELL, load_mode="dio")
    assert "--load=dio" in engine.argv(dio, "/d/b", "/d/m")
    assert "--load=none" in engine.argv(CELL, "/d/b", "/d/m")  # mmap false, said its way
    reason = engine.supports(dataclasses.replace(CELL, cache="warm"))
    assert reason is not None and "cannot honour a cache knob" in reason


# One line per figure, as many tools print them; run 2 lost its prompt line.
LINES_YAML = TOY_YAML.replace("""  prompt_tps: 'pp ([0-9.]+) tok/s'
  gen_tps: 'tg ([0-9.]+) tok/s'
  ttft: {pattern: 'prompt took ([0-9.]+) ms', scale: 0.001}
""", """  prompt_tps: '^pp ([0-9.]+) tok/s'
  gen_tps: '^tg ([0-9.]+) tok/s'
""")


def test_a_repetition_missing_a_line_does_not_shift_the_later_ones(tmp_path: Path) -> None:
    path = tmp_path / "lines.yaml"
    path.write_text(LINES_YAML)
    engine = load_generic_engine(path)
    text = ("pp 1000.0 tok/s\ntg 40.0 tok/s\n"
            "tg 41.0 tok/s\n"  # run 2: its pp line is missing
            "pp 1200.0 tok/s\ntg 42.0 tok/s\n")
    got = [(m.rep, m.prompt_tps, m.gen_tps) for m in engine.measure(engine.parse(text))]
    assert got == [(0, 1000.0, 40.0), (1, None, 41.0), (2, 1200.0, 42.0)]
    lost_last = "pp 1000.0 tok/s\ntg 40.0 tok/s\npp 1100.0 tok/s\ntg 41.0 tok/s\npp 1200.0 tok/s\n"
    got = [(m.prompt_tps, m.gen_tps) for m in engine.measure(engine.parse(lost_last))]
    assert got == [(1000.0, 40.0), (1100.0, 41.0), (1200.0, None)]


def test_llama_cpp_main_s_own_timings_declared_from_yaml() -> None:
    """A generic declaration of llama.cpp's old main, read on the lines a user's run printed."""
    engine = engine_from_dict({
        "name": "llama-main", "argv": ["{binary}", "-m", "{model}", "-t", "{threads}"],
        "output": {
            "format": "regex", "stream": "stderr",
            "captures": {
                "prompt_tokens": r"prompt eval time =\s*[0-9.]+ ms /\s*([0-9]+) tokens",
                "generated_tokens": r"^llama_print_timings:\s+eval time =\s*[0-9.]+ ms /\s*"
                                    r"([0-9]+) runs"},
            "prompt_tps": r"prompt eval time =.*?([0-9.]+) tokens per second\)",
            "gen_tps": r"^llama_print_timings:\s+eval time =.*?([0-9.]+) tokens per second\)",
            "load": {"pattern": r"load time =\s*([0-9.]+) ms", "unit": "ms"}}}, "inline")
    text = (Path(__file__).parent / "data" / "llama_cpp_main_timings_issue34.txt").read_text()
    (record,) = engine.parse(EngineOutput("", text))
    assert (record.as_dict()["prompt_tokens"], record.as_dict()["generated_tokens"]) == (14, 490)
    (m,) = engine.measure([record])
    assert (m.prompt_tps, m.gen_tps) == (64.90, 21.59)
    assert m.load_s == pytest.approx(0.21725)
