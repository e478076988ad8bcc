"""The KV cross's orchestration with a fake engine, its cache, and bad input at the command line;
and one real measurement on Gemma 3 270M (slow)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.analysis import kvmeasure
from harness.analysis.kvmeasure import (
    CellRun,
    KvRequest,
    ensure_kv_quality,
    measure_cells,
    pydoc_text,
    read_cache,
    tokenize,
)
from harness.analysis.kvquality import KV_QUALITY_FILE, EngineBuild, KvType, parse_kv_types
from harness.artifacts import testmodels

from .factory import run_analysis

VOCAB = 12
BUILD = EngineBuild("0.3.36", "0c1e570", "CPU : AVX2 = 1", kv_rotation=True)
NOISE = {"f16": 0.0, "q8_0": 0.1, "q4_0": 0.8}


class FakeEngine:
    """Logits fixed by the position, plus noise growing with the cache's coarseness (K's and V's
    added), and a generation that loops with a period set by the KV type; records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def __call__(self, path: Path, tokens: Sequence[int], depth: int, window: int,
                 gen_tokens: int, kv: KvType) -> CellRun:
        self.calls.append((path.name, depth, kv.label))
        base = np.random.default_rng(depth).normal(size=(window, VOCAB)).astype(np.float32)
        noise = np.random.default_rng(7).normal(size=base.shape).astype(np.float32)
        logits = base + (NOISE[kv.k] + NOISE[kv.v]) * noise
        period = 3 if kv.k == "q4_0" else 50
        return CellRun(logits, tuple(i % period for i in range(gen_tokens)))


def test_each_kv_type_is_scored_against_f16_decoded_first_at_the_same_depth(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, VOCAB, 300)]
    cells = measure_cells(tmp_path / "w.gguf", "Q8_0", "sha", tokens,
                          parse_kv_types(["q4_0,q8_0,q8_0/q4_0"]), 100, window=40,
                          gen_tokens=30, text="t@1", build=BUILD, run=engine)
    assert [c[2] for c in engine.calls] == ["f16", "q4_0", "q8_0", "q8_0/q4_0"]
    assert {c[1] for c in engine.calls} == {100}
    kl = {c.kv: c.kl for c in cells}
    assert list(kl) == ["q4_0", "q8_0", "q8_0/q4_0"]  # only what was asked for
    assert 0 < kl["q8_0"] < kl["q8_0/q4_0"] < kl["q4_0"]
    q4 = cells[0]
    # 30 tokens of period 3: the last 15 repeat the first 15
    assert q4.longest_loop == 15 and q4.gen_tokens == 30 and q4.repeated_4gram > 0.8
    assert cells[1].longest_loop == 0 and cells[1].repeated_4gram == 0.0


@pytest.fixture()
def fake_ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-file 'real' ladder in tmp_path and a 300-token text."""
    folder = tmp_path / "ladder"
    folder.mkdir()
    paths = {}
    for quant in ("F16", "Q8_0"):
        paths[quant] = folder / f"{quant}.gguf"
        paths[quant].write_bytes(quant.encode())
    monkeypatch.setattr(testmodels, "ensure_ladder", lambda *a, **k: paths)
    monkeypatch.setattr(testmodels, "ladder_dir", lambda *a, **k: folder)
    monkeypatch.setattr(kvmeasure, "tokenize", lambda path, text: [i % VOCAB for i in range(300)])
    monkeypatch.setattr(kvmeasure, "read_model_info",
                        lambda path: SimpleNamespace(context_length=256))
    return folder


def test_cells_are_cached_per_build_and_other_builds_kept_beside(fake_ladder: Path) -> None:
    engine = FakeEngine()
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["f16,q4_0"]), (100, 200), 40,
                        20)
    first = ensure_kv_quality(request, run=engine, build=BUILD)
    assert first.measured == 4 and len(engine.calls) == 4 and first.text_tokens == 300
    again = ensure_kv_quality(request, run=engine, build=BUILD)
    assert again.measured == 0 and len(engine.calls) == 4 and again.cells == first.cells
    unrotated = EngineBuild("0.3.36", "0c1e570", "CPU : AVX2 = 1", kv_rotation=False)
    other = ensure_kv_quality(request, run=engine, build=unrotated)
    assert other.measured == 4
    stored = read_cache(fake_ladder / KV_QUALITY_FILE).values()
    assert sorted((c.build.kv_rotation, c.depth, c.kv) for c in stored) == sorted(
        (rot, d, kv) for rot in (True, False) for d in (100, 200) for kv in ("f16", "q4_0"))
    assert all(c.ladder_shas and c.sha256 in c.ladder_shas for c in stored)


@pytest.mark.parametrize(("args", "option"), [
    (["--kv", "q3_k"], "--kv"),
    (["--kv", "q8_0/bogus"], "--kv"),
    (["--depth", "0"], "--depth"),
    (["--depth", "261"], "--depth 261"),  # 261 + a window of 40 > 300 tokens
    (["--kv", "q4_0", "--quant", "Q2_K"], "--quant Q2_K"),
    (["--depth", "200", "--gen-tokens", "60"], "trained context of 256"),
])
def test_bad_input_is_one_line_exit_2_and_keeps_what_is_stored(
        fake_ladder: Path, args: list[str], option: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvmeasure, "engine_build", lambda *a: BUILD)
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["q4_0"]), (100,), 40, 20)
    ensure_kv_quality(request, run=FakeEngine(), build=BUILD)
    stored = (fake_ladder / KV_QUALITY_FILE).read_bytes()
    result = run_analysis("quality", "--ladder", "gemma3-270m", "--window", "40", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in result.output
    assert (fake_ladder / KV_QUALITY_FILE).read_bytes() == stored


def test_the_command_prints_the_cross_as_json(fake_ladder: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvmeasure, "engine_build", lambda *a: BUILD)
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["f16,q8_0,q4_0"]), (100,),
                        40, 20)
    ensure_kv_quality(request, run=FakeEngine(), build=BUILD)  # cached: the command reads it
    result = run_analysis("quality", "--ladder", "gemma3-270m", "--kv", "f16,q8_0,q4_0",
                          "--depth", "100", "--window", "40", "--gen-tokens", "20", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["measured_now"] == 0 and doc["build"]["kv_rotation"] is True
    assert [(c["kv"], c["depth"]) for c in doc["cells"]] == [("f16", 100), ("q8_0", 100),
                                                             ("q4_0", 100)]
    assert doc["cells"][0]["kl"] == 0.0 and doc["cells"][2]["kl"] > doc["cells"][1]["kl"]


@pytest.mark.slow
def test_on_gemma_a_q4_0_cache_drifts_from_f16_and_f16_matches_itself(
        gemma_ladder: dict[str, Path]) -> None:
    path = gemma_ladder["Q8_0"]
    tokens = tokenize(path, pydoc_text())
    assert len(tokens) > 50_000  # the text is long enough for depths beyond 6k
    kvs = parse_kv_types(["f16,q4_0"])
    build = kvmeasure.engine_build({})
    cells = {c.kv: c for c in measure_cells(path, "Q8_0", "sha", tokens, kvs, 512, window=64,
                                            gen_tokens=24, text="t", build=build)}
    f16, q4 = cells["f16"], cells["q4_0"]
    assert f16.kl == 0.0 and f16.top1 == 1.0 and f16.kl_max == 0.0
    assert q4.kl > 0 and q4.kl_max >= q4.kl and q4.top1 <= 1.0
    assert 1 < f16.ppl < 1000 and 1 < q4.ppl < 1000  # English, far better than chance
    assert f16.gen_tokens >= 1 and 0.0 <= q4.repeated_4gram <= 1.0
    assert build.kv_rotation and build.llama_cpp_python
