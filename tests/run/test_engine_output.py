"""What the trial reads of an engine beyond stdout: stderr, a file the tool writes, the last lines
of output nobody could parse, and the engine's own figures beside ours."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.engines.base import (
    TTFT_FIRST_DECODE,
    EngineOutput,
    Measurement,
    as_output,
    device_family,
    prompt_text,
)
from harness.run.modelfiles import model_folder, prompt_artifact
from harness.run.probe import split_sections
from harness.run.trial import ENGINE_FILE, _after_command, _engine_columns, _tail


def test_streams_are_chosen_by_name_and_both_keeps_stdout_first() -> None:
    out = EngineOutput("a\n", "b\n", "c\n")
    assert [out.stream(s) for s in ("stdout", "stderr", "file")] == ["a\n", "b\n", "c\n"]
    assert out.stream("both") == "a\n\nb\n"
    assert as_output("x").stdout == "x" and as_output(out) is out


def test_a_failed_parse_keeps_the_last_lines_of_every_stream() -> None:
    out = EngineOutput("\n".join(f"line {i}" for i in range(20)), "boom", "partial")
    tail = _tail("boom", out, parsed=False)
    assert tail.splitlines() == ["boom", "[stdout]", *(f"line {i}" for i in range(12, 20)),
                                 "[file]", "partial"]
    assert _tail("boom", out, parsed=True) == "boom"


def test_the_engines_own_figures_are_stored_and_rates_only_when_ok() -> None:
    m = Measurement(0, 100.0, 20.0, 0.3, aggregate_n=5, prompt_tps_sd=4.0, gen_tps_sd=1.0,
                    ttft_definition=TTFT_FIRST_DECODE, load_s=1.25, peak_bytes=512 << 20)
    assert _engine_columns(m, m) == {
        "engine_aggregate_n": 5, "pp_tps_sd": 4.0, "tg_tps_sd": 1.0,
        "ttft_definition": TTFT_FIRST_DECODE, "engine_load_ms": 1250.0,
        "engine_peak_bytes": 512 << 20}
    failed = _engine_columns(None, m)
    assert failed["pp_tps_sd"] is None and failed["engine_load_ms"] == 1250.0
    plain = _engine_columns(Measurement(0, 1.0, 2.0, 0.1), None)
    assert plain["ttft_definition"] == "prefill" and "engine_load_ms" not in plain


def test_the_after_read_returns_the_tools_file_in_its_own_section(tmp_path: Path) -> None:
    folder = tmp_path / "trial dir"
    folder.mkdir()
    (folder / "pid").write_text("1\n")
    (folder / "bench out.txt").write_text("decode: 12.5 tok/s\n")
    line = _after_command(str(folder), "bench out.txt").replace(
        "cat /proc/pressure/memory", "true")
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=False)
    sections = split_sections(done.stdout)
    assert sections[ENGINE_FILE].strip() == "decode: 12.5 tok/s"
    assert not folder.exists()  # the trial's folder goes once read
    assert ENGINE_FILE not in _after_command(str(folder))


def test_device_families_follow_llama_cpp_device_names() -> None:
    assert [device_family(d) for d in ("none", "Vulkan0", "OpenCL0", "HTP0", "BLAS")] == [
        "cpu", "gpu", "gpu", "npu", None]


def test_a_model_folder_is_pushed_whole_under_one_digest(tmp_path: Path) -> None:
    folder = tmp_path / "qwen-mnn"
    folder.mkdir()
    for name in ("config.json", "llm.mnn", "tokenizer.txt"):
        (folder / name).write_text(name)
    (folder / "sub").mkdir()  # subfolders are not the model's
    found = model_folder(folder / "config.json", "models.q.engines.m", ("tokenizer.txt",))
    assert sorted(Path(a.remote).name for a in found.artifacts) == [
        "config.json", "llm.mnn", "tokenizer.txt"]
    assert found.remote.endswith(f"/models/{found.sha256}/config.json")
    (folder / "llm.mnn").write_text("other weights")
    assert model_folder(folder / "config.json", "w").sha256 != found.sha256


def test_a_model_folder_without_what_the_engine_reads_is_one_line(tmp_path: Path) -> None:
    import pytest

    from harness.errors import ConfigError

    (tmp_path / "m.pte").write_text("x")
    with pytest.raises(ConfigError, match=r"^models.q.engines.e: the engine reads "
                                          r"tokenizer.model beside m.pte"):
        model_folder(tmp_path / "m.pte", "models.q.engines.e", ("tokenizer.model",))
    with pytest.raises(ConfigError, match="is not a file"):
        model_folder(tmp_path / "absent.pte", "models.q.engines.e")


def test_the_prompt_file_has_n_words_and_is_made_once(tmp_path: Path) -> None:
    assert prompt_text(3) == "the the the"
    first = prompt_artifact(64, tmp_path)
    assert first.local.read_text().split() == ["the"] * 64
    assert prompt_artifact(64, tmp_path) == first
    assert first.remote.endswith(f"/prompts/{first.sha256}/prompt.txt")


def test_a_run_with_an_engine_file_missing_stops_before_anything_is_stored(
        tmp_path: Path) -> None:
    import pytest

    from harness.errors import ConfigError
    from harness.run.session import RunOptions, prepare_matrix

    (tmp_path / "et").mkdir()
    (tmp_path / "et" / "m.pte").write_text("x")  # no tokenizer.model beside it
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "name: t\naxes: {engine: [executorch-llama], build: [b], model: [m], quant: [Q4_0],"
        " n_ctx: [512]}\nmodels:\n  m:\n    path: /nonexistent/m-{quant}.gguf\n"
        "    card: {n_layer: 2, n_head: 2, n_head_kv: 2, head_dim: 64, n_embd: 128, n_ff: 256,"
        " n_vocab: 1000, n_params: 1000000}\n"
        f"    engines: {{executorch-llama: {tmp_path}/et/m.pte}}\n"
        "workload: {n_prompt: 8, n_gen: 8}\n")
    with pytest.raises(ConfigError, match=r"models.m.engines.executorch-llama: the engine "
                                          r"reads tokenizer.model beside m.pte"):
        prepare_matrix(matrix, RunOptions(results=tmp_path / "results",
                                          builds=tmp_path / "builds"))
    assert not (tmp_path / "results").exists()
