"""The engine axis of a matrix, the planner's one question to an engine, the phone's Python."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from harness.cell import DEVICE_PYTHON_BUILD, Cell
from harness.errors import ConfigError
from harness.matrix import expand, parse_matrix
from harness.memory import ModelCard
from harness.plan import Reason, plan_cells
from harness.run.pyruntime import PythonRuntime, parse_probe, probe_command

CARD = ModelCard(n_layer=4, n_head=4, n_head_kv=2, head_dim=32, n_embd=128, n_ff=256,
                 n_vocab=1000, n_params=2_000_000)


def _card() -> dict[str, int]:
    return {k: v for k, v in dataclasses.asdict(CARD).items() if v is not None}


def _matrix(**axes: object) -> dict[str, object]:
    base: dict[str, object] = {"build": ["b1", "b2"], "model": ["m"], "quant": ["Q8_0"],
                               "n_ctx": [512]}
    base.update(axes)
    model = {"path": "/nonexistent/m-{quant}.gguf", "card": _card()}
    return {"name": "t", "axes": base, "models": {"m": model},
            "workload": {"n_prompt": 32, "n_gen": 16}}


def test_without_an_engine_axis_cells_and_their_ids_are_as_before() -> None:
    cells = expand(parse_matrix(_matrix(), "m.yaml"))
    assert {c.engine for c in cells} == {"llama-bench"}
    plain = dataclasses.asdict(cells[0])
    plain.pop("engine")
    assert Cell(**plain).cell_id == cells[0].cell_id
    assert "engine" not in cells[0].identity()


def test_llama_cpp_python_cells_run_the_phones_install_whatever_builds_are_named() -> None:
    cells = expand(parse_matrix(_matrix(engine=["llama-bench", "llama-cpp-python"]), "m.yaml"))
    runs = sorted((c.engine, c.build) for c in cells)
    assert runs == [("llama-bench", "b1"), ("llama-bench", "b2"),
                    ("llama-cpp-python", DEVICE_PYTHON_BUILD)]
    # one configuration: the engines (and builds) pair on config_id, not on cell_id
    assert len({c.config_id for c in cells}) == 1
    assert len({c.cell_id for c in cells}) == 3
    assert {c.setup_label() for c in cells} == {"b1", "b2", "llama-cpp-python"}


def test_an_unknown_engine_is_one_line_naming_the_file_and_key() -> None:
    with pytest.raises(ConfigError, match=r"^m.yaml: axes.engine\[0\]: unknown engine \"mlc\""):
        parse_matrix(_matrix(engine=["mlc"]), "m.yaml")


def test_a_generic_engine_file_is_an_engine(tmp_path: Path) -> None:
    spec = tmp_path / "mnn.yaml"
    spec.write_text('name: mnn\ntool: llm_bench\nargv: ["{binary}", "{model}"]\n'
                    'output: {format: regex, gen_tps: "decode ([0-9.]+)"}\n')
    cells = expand(parse_matrix(_matrix(engine=[str(spec)]), "m.yaml"))
    assert {c.engine for c in cells} == {str(spec)}
    assert {c.setup_label() for c in cells} == {f"{spec}@b1", f"{spec}@b2"}


def test_the_planner_asks_the_cells_engine() -> None:
    cells = expand(parse_matrix(_matrix(engine=["llama-bench", "llama-cpp-python"],
                                        affinity=["big"]), "m.yaml"))
    planned = {p.cell.engine: p for p in plan_cells(cells, {("m", "Q8_0"): CARD}, 8 << 30)}
    assert planned["llama-bench"].reason_code == Reason.FITS
    python = planned["llama-cpp-python"]
    assert python.reason_code == Reason.ENGINE_UNSUPPORTED == "engine_unsupported"
    assert python.reason == "llama-cpp-python cannot pin threads to CPUs; use affinity 'all'"
    assert python.unsupported and not python.feasible


def test_the_python_probe_runs_on_mksh_words_and_reads_the_version() -> None:
    line = probe_command()
    assert "/data/local/tmp/python/bin/python3" in line and "[ -x" in line
    found = parse_probe("@@harness:python /data/local/tmp/python/bin/python3\n0.3.36\n", "S1")
    assert found == PythonRuntime("/data/local/tmp/python/bin/python3", "0.3.36")


def test_the_python_probe_says_what_is_missing() -> None:
    assert parse_probe("", "S1") == (
        "S1 has no Python for llama-cpp-python: push a Python for Android with "
        "llama-cpp-python to /data/local/tmp/python (docs/engines.md)")
    broken = parse_probe("@@harness:python /p/python3\nModuleNotFoundError: No module named "
                         "'llama_cpp'\n", "S1")
    assert isinstance(broken, str)
    assert broken.startswith("S1: /p/python3 cannot import llama_cpp (ModuleNotFoundError")


def test_a_model_names_its_file_per_engine_of_the_axis() -> None:
    data = _matrix(engine=["llama-bench", "llama-cpp-python"])
    data["models"]["m"]["engines"] = {  # type: ignore[index]
        "llama-cpp-python": "/models/m-py-{quant}/config.json"}
    data["models"]["m"]["converted_from"] = "m's F16 GGUF"  # type: ignore[index]
    source = parse_matrix(data, "m.yaml").models["m"]
    assert str(source.engine_path("llama-cpp-python", "Q8_0")) == "/models/m-py-Q8_0/config.json"
    assert source.engine_path("llama-bench", "Q8_0") is None
    assert source.converted_from == "m's F16 GGUF"


def test_a_model_file_for_an_engine_not_on_the_axis_is_one_line() -> None:
    data = _matrix()
    data["models"]["m"]["engines"] = {"mnn-llm-bench": "m/config.json"}  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"^m.yaml: models.m.engines.mnn-llm-bench: no cell "
                                          r"of model m runs engine \"mnn-llm-bench\" \(its "
                                          r"engines: llama-bench\)"):
        parse_matrix(data, "m.yaml")


@pytest.mark.parametrize(
    ("output", "extra", "key"),
    [
        ({"format": "regex", "stream": "stdlog", "gen_tps": "tg=([0-9.]+)"}, {}, "output.stream"),
        ({"format": "jsonl", "gen_tps": {"expr": "tokens / decode_s", "unit": "s"},
          "captures": {"tokens": "n"}}, {}, "output.gen_tps.expr"),
        ({"format": "regex", "gen_tps": "tg=([0-9.]+)"}, {"prompt_file": False}, "prompt_file"),
    ],
)
def test_a_bad_engine_file_stops_plan_with_one_line_naming_file_and_key(
        tmp_path: Path, output: dict[str, object], extra: dict[str, object], key: str) -> None:
    from click.testing import CliRunner

    from harness.cli import main

    spec = tmp_path / "tool.yaml"
    spec.write_text(yaml.safe_dump({"name": "tool", "argv": ["{binary}", "{prompt_file}"],
                                    "output": output, **extra}))
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump(_matrix(engine=[str(spec)])))
    result = CliRunner().invoke(main, ["plan", str(matrix), "--memory", "4GiB"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {spec}: key '{key}'"), line


def test_the_five_engine_phone_matrix_pairs_each_engine_with_its_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.matrix import load_matrix

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)  # its generic engine is named by a path from the repository
    matrix = load_matrix(repo / "matrices" / "engines-phone.yaml")
    cells = expand(matrix)
    assert [(c.engine, c.build) for c in cells] == [
        ("llama-bench", "llama-b6000"), ("mnn-llm-bench", "mnn-3.6"),
        ("litert-lm-advanced", "litert-lm-0.9"), ("executorch-llama", "executorch-1.5"),
        ("matrices/engines/onnxruntime-genai.yaml", "ort-genai-0.18")]
    assert len({c.config_id for c in cells}) == 1  # one configuration, five engines
    card = matrix.models["qwen"].card
    assert card is not None
    planned = plan_cells(cells, {("qwen", "Q4_0"): card}, 8 << 30)
    assert all(p.feasible for p in planned), [p.reason for p in planned]
    assert str(matrix.models["qwen"].engine_path("mnn-llm-bench", "Q4_0")) == (
        "models/qwen2.5-0.5b-mnn/config.json")
