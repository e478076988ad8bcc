"""onnxruntime-genai: the GGUF export (folder, shapes, cache, refusals), the standalone bench
script run as a subprocess, and greedy tokens checked against llama.cpp's on the same ids."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from harness.artifacts import onnx_genai
from harness.artifacts.hashing import file_sha256
from harness.artifacts.onnx_genai import CONVERTER_VERSION, ensure_onnx_genai, export_onnx_genai
from harness.engines import ort_genai_bench
from harness.errors import ModelError

BENCH = Path(ort_genai_bench.__file__)
FILES = ("model.onnx", "model.onnx.data", "genai_config.json")


@pytest.fixture(scope="module")
def tiny_onnx(tiny_ladder: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny F16 model exported into a cache of this module's own."""
    return ensure_onnx_genai(tiny_ladder["F16"], tmp_path_factory.mktemp("cache"))


def _metadata(path: Path) -> dict[str, Any]:
    reader = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer")}


def _write_gguf(path: Path, arch: str, **extra: int) -> Path:
    """A minimal GGUF of ``arch`` (a few keys, one small tensor), enough to be read."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(1)
    writer.add_embedding_length(256)
    writer.add_head_count(4)
    for key, value in extra.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_tensor("token_embd.weight", np.zeros((8, 256), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- the export ---------------------------------------------------------------------------------


def test_export_writes_the_folder_with_the_ggufs_shapes(
    tiny_ladder: dict[str, Path], tiny_onnx: Path
) -> None:
    source = tiny_ladder["F16"]
    assert tiny_onnx.name == f"{file_sha256(source)[:16]}-{CONVERTER_VERSION}"
    assert tiny_onnx.parent.name == "onnx-genai"
    assert sorted(p.name for p in tiny_onnx.iterdir()) == sorted(FILES)
    assert not [p for p in tiny_onnx.parent.iterdir() if ".tmp-" in p.name]
    meta = _metadata(source)
    config = json.loads((tiny_onnx / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert decoder["hidden_size"] == meta["llama.embedding_length"] == 256
    assert decoder["num_hidden_layers"] == meta["llama.block_count"]
    assert decoder["num_attention_heads"] == meta["llama.attention.head_count"]
    assert decoder["num_key_value_heads"] == meta["llama.attention.head_count_kv"]
    assert decoder["head_size"] == meta["llama.rope.dimension_count"] == 64
    assert config["model"]["vocab_size"] == meta["llama.vocab_size"]
    assert config["model"]["context_length"] == min(meta["llama.context_length"], 8192)
    assert "intra_op_num_threads" not in decoder["session_options"]  # the bench sets it
    # F32 weights: at least four bytes per parameter of the GGUF's matrices.
    n_params = sum(int(np.prod(t.shape)) for t in gguf.GGUFReader(source).tensors)
    assert (tiny_onnx / "model.onnx.data").stat().st_size >= 4 * n_params


def test_the_graph_uses_grouped_query_attention_with_interleaved_rotary(tiny_onnx: Path) -> None:
    import onnx

    model = onnx.load(str(tiny_onnx / "model.onnx"), load_external_data=False)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 3 and {n.domain for n in gqa} == {"com.microsoft"}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gqa[0].attribute}
    assert attrs["do_rotary"] == 1 and attrs["rotary_interleaved"] == 1
    assert attrs["num_heads"] == 4 and attrs["kv_num_heads"] == 2
    names = [i.name for i in model.graph.input]
    assert names[:2] == ["input_ids", "attention_mask"] and len(names) == 2 + 2 * 3


def test_a_second_call_returns_the_cached_folder_untouched(
    tiny_ladder: dict[str, Path], tiny_onnx: Path
) -> None:
    before = {name: (tiny_onnx / name).stat().st_mtime_ns for name in FILES}
    again = ensure_onnx_genai(tiny_ladder["F16"], tiny_onnx.parent.parent)
    assert again == tiny_onnx
    assert {name: (again / name).stat().st_mtime_ns for name in FILES} == before


def test_a_quantised_rung_is_dequantised_to_the_same_shapes(
    tiny_ladder: dict[str, Path], tiny_onnx: Path, tmp_path: Path
) -> None:
    out = export_onnx_genai(tiny_ladder["Q4_K_M"], tmp_path / "q4")
    assert json.loads((out / "genai_config.json").read_text()) == \
        json.loads((tiny_onnx / "genai_config.json").read_text())
    sizes = [(d / "model.onnx.data").stat().st_size for d in (out, tiny_onnx)]
    assert sizes[0] == sizes[1]  # F32 either way: not llama.cpp's Q4_K_M


def test_export_replaces_an_older_folder_atomically(
    tiny_ladder: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    export_onnx_genai(tiny_ladder["F16"], out)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_non_llama_gguf_is_refused_on_one_line(tmp_path: Path) -> None:
    source = _write_gguf(tmp_path / "other.gguf", "gemma3")
    with pytest.raises(ModelError) as caught:
        ensure_onnx_genai(source, tmp_path / "cache")
    message = str(caught.value)
    assert "\n" not in message
    assert str(source) in message and "'gemma3'" in message
    assert not list((tmp_path / "cache" / "onnx-genai").glob("*-*"))


def test_a_llama_mixture_of_experts_is_refused(tmp_path: Path) -> None:
    source = _write_gguf(tmp_path / "moe.gguf", "llama", expert_count=8)
    with pytest.raises(ModelError, match="experts"):
        export_onnx_genai(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_gguf_is_a_model_error(tmp_path: Path) -> None:
    source = tmp_path / "junk.gguf"
    source.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelError, match=r"junk\.gguf"):
        onnx_genai.read_shape(source)


# -- the bench script, in process (no engine run) -----------------------------------------------


def test_the_random_prompt_starts_with_bos_and_avoids_special_ids() -> None:
    config = {"model": {"vocab_size": 50, "bos_token_id": 1, "eos_token_id": 2,
                        "pad_token_id": 2}}
    ids = ort_genai_bench.random_prompt(config, 400, seed=0)
    assert len(ids) == 400 and ids.dtype == np.int32 and ids[0] == 1
    assert not set(ids[1:].tolist()) & {1, 2} and ids.max() < 50
    assert np.array_equal(ids, ort_genai_bench.random_prompt(config, 400, seed=0))


def test_prompt_ids_files_are_json_or_whitespace(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[1, 5, 9]")
    (tmp_path / "b.txt").write_text("1 5\n9\n")
    for name in ("a.json", "b.txt"):
        assert ort_genai_bench.file_prompt(tmp_path / name).tolist() == [1, 5, 9]


def test_the_bench_needs_a_prompt_size() -> None:
    with pytest.raises(SystemExit):
        ort_genai_bench.parse_args(["--model", "m", "--n-gen", "4", "--threads", "1"])


# -- the engine ---------------------------------------------------------------------------------


def _bench(model: Path, *args: str) -> list[dict[str, Any]]:
    argv = [sys.executable, str(BENCH), "--model", str(model), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_the_bench_prints_one_json_line_per_repetition(tiny_onnx: Path) -> None:
    lines = _bench(tiny_onnx, "--n-prompt", "32", "--n-gen", "16", "--threads", "2",
                   "--reps", "2")
    assert [line["rep"] for line in lines] == [0, 1]
    for line in lines:
        assert line["engine"] == "onnxruntime-genai" and line["version"]
        assert line["n_threads"] == 2
        assert line["prompt_tokens"] == 32 and line["generated_tokens"] == 16
        assert len(line["tokens"]) == 17  # the prefill's token, then 16 decode steps
        for key in ("load_ms", "prefill_ms", "decode_ms", "prefill_tps", "decode_tps",
                    "ttft_ms"):
            assert line[key] > 0, key
        assert line["ttft_ms"] >= line["prefill_ms"]
        assert line["decode_tps"] == pytest.approx(16 / (line["decode_ms"] / 1e3))
    assert lines[0]["tokens"] == lines[1]["tokens"]  # greedy, same prompt
    assert lines[0]["load_ms"] == lines[1]["load_ms"]  # loaded once


@pytest.mark.slow
def test_the_thread_count_asked_reaches_the_session(tiny_onnx: Path) -> None:
    """onnxruntime's intra-op pool has T - 1 workers: the process has one more thread per
    thread asked, so the overlay took effect (the folder itself pins no count)."""
    counts = {}
    for threads in (1, 3):
        (line,) = _bench(tiny_onnx, "--n-prompt", "8", "--n-gen", "2", "--threads",
                         str(threads), "--no-warmup")
        counts[threads] = line["process_threads"]
    assert counts[3] - counts[1] == 2, counts


def _llama_cpp_greedy(path: Path, prompt: list[int], n_tokens: int) -> tuple[list[int], Any]:
    """llama.cpp's greedy continuation of ``prompt`` (one thread) and its prefill logits."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=1, logits_all=False,
                verbose=False)
    tokens: list[int] = []
    llm.eval(prompt)
    first_logits = None
    for _ in range(n_tokens):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
        first_logits = logits if first_logits is None else first_logits
        tokens.append(int(np.argmax(logits)))
        llm.eval([tokens[-1]])
    return tokens, first_logits


@pytest.mark.slow
def test_greedy_tokens_agree_with_llama_cpp(
    tiny_ladder: dict[str, Path], tiny_onnx: Path, tmp_path: Path
) -> None:
    """The same prompt ids on the F16 GGUF (llama.cpp) and its export (onnxruntime-genai) give
    the same greedy tokens: a wrong rotary layout diverges by the third token."""
    prompt = np.random.default_rng(1).integers(3, 1024, 32)
    prompt[0] = 1
    ids_file = tmp_path / "prompt.json"
    ids_file.write_text(json.dumps(prompt.tolist()))
    (line,) = _bench(tiny_onnx, "--prompt-ids", str(ids_file), "--n-gen", "16", "--threads",
                     "1", "--reps", "1", "--no-warmup")
    expected, _ = _llama_cpp_greedy(tiny_ladder["F16"], prompt.tolist(), 17)
    assert 2 not in expected  # no EOS (the bench suppresses it)
    agree = next((i for i, (a, b) in enumerate(zip(line["tokens"], expected, strict=True))
                  if a != b), len(expected))
    assert agree >= 9, f"{agree}/17 agree: ort {line['tokens']} llama.cpp {expected}"


@pytest.mark.slow
def test_prefill_logits_match_llama_cpp(tiny_ladder: dict[str, Path], tiny_onnx: Path) -> None:
    import onnxruntime_genai as og  # type: ignore[import-untyped]

    prompt = np.random.default_rng(2).integers(3, 1024, 24).astype(np.int32)
    prompt[0] = 1
    _, expected = _llama_cpp_greedy(tiny_ladder["F16"], prompt.tolist(), 1)
    model, _ = ort_genai_bench.load_model(tiny_onnx, 1)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=32, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    logits = generator.get_logits()[0, -1]
    scale = float(np.abs(expected).max())
    # llama.cpp rounds activations to F16 for F16 weights; the export computes in F32.
    assert float(np.abs(logits - expected).max()) < 1e-2 * scale


def test_the_cli_exports_a_ladder_rung_and_refuses_what_it_cannot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_ladder: dict[str, Path]) -> None:
    from click.testing import CliRunner

    from harness.cli import main

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("harness.cli.models.ensure_ladder", lambda size, **_: tiny_ladder)
    made = CliRunner().invoke(main, ["models", "onnx", "--size", "tiny", "--quant", "F16",
                                     "--json"])
    assert made.exit_code == 0, made.output
    doc = json.loads(made.stdout)
    assert Path(doc["model"]).is_file() and doc["gguf"] == str(tiny_ladder["F16"])
    assert Path(doc["folder"]).parent == tmp_path / "cache" / "onnx-genai"
    bad = CliRunner().invoke(main, ["models", "onnx", "--size", "tiny", "--quant", "Q9_X"])
    assert bad.exit_code == 2 and "the tiny ladder has no Q9_X" in bad.output
    (tmp_path / "x.gguf").write_text("not a gguf")
    wrong = CliRunner().invoke(main, ["models", "onnx", str(tmp_path / "x.gguf")])
    assert wrong.exit_code == 2
    (line,) = wrong.output.strip().splitlines()
    assert line.startswith(f"Error: {tmp_path / 'x.gguf'}: not a readable GGUF")
