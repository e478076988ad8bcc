"""The KV cross's orchestration with a fake engine (places, loop figures, cache, --text), bad
input at the command line; the real decoding at several places on the tiny model; and one real
measurement on Gemma 3 270M (slow)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.analysis import kv_loss_measure
from harness.analysis.kv_loss import (
    KV_QUALITY_FILE,
    EngineBuild,
    KvType,
    parse_kv_types,
    position_offsets,
)
from harness.analysis.kv_loss_measure import (
    CellRun,
    KvRequest,
    ensure_kv_quality,
    llama_cell,
    measure_cells,
    pydoc_text,
    read_cache,
    tokenize,
)
from harness.artifacts import testmodels

from .factory import run_analysis

VOCAB = 12
BUILD = EngineBuild("0.3.36", "0c1e570", "CPU : AVX2 = 1", kv_rotation=True)
NOISE = {"f16": 0.0, "q8_0": 0.1, "q4_0": 0.8}


def _text(n_words: int, seed: int = 0) -> str:
    """``n_words`` words ``w1`` .. ``w11``, one token each after the BOS (fake_tokenize)."""
    ids = np.random.default_rng(seed).integers(1, VOCAB, n_words)
    return " ".join(f"w{i}" for i in ids) + "\n"


def fake_tokenize(path: Path, text: str) -> list[int]:
    return [0, *(int(word[1:]) for word in text.split())]


class FakeEngine:
    """Logits fixed by the text read, plus noise growing with the cache's coarseness (K's and V's
    added); the generation: q4_0's always loops (period 3), f16's and the others' only where the
    text's token at the depth is a multiple of 3 (period 2), else it never repeats. Records
    (file, depth, KV, token at the depth) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str, int]] = []

    def __call__(self, path: Path, tokens: Sequence[int], depth: int, window: int,
                 gen_tokens: int, kv: KvType) -> CellRun:
        self.calls.append((path.name, depth, kv.label, tokens[depth]))
        seed = [depth, *tokens[depth - 4:depth]]
        base = np.random.default_rng(seed).normal(size=(window, VOCAB)).astype(np.float32)
        noise = np.random.default_rng(7).normal(size=base.shape).astype(np.float32)
        logits = base + (NOISE[kv.k] + NOISE[kv.v]) * noise
        period = 3 if kv.k == "q4_0" else 2 if tokens[depth] % 3 == 0 else 10**6
        return CellRun(logits, tuple(i % period for i in range(gen_tokens)))


def test_each_kv_type_is_scored_against_f16_decoded_first_at_each_place(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    tokens = fake_tokenize(tmp_path, _text(299))
    cells = measure_cells(tmp_path / "w.gguf", "Q8_0", "sha", tokens,
                          parse_kv_types(["q4_0,q8_0,q8_0/q4_0"]), 100, window=40,
                          gen_tokens=30, text="t@1", build=BUILD, positions=4, run=engine)
    offsets = position_offsets(300, 100, 40, 4)
    assert offsets == (0, 53, 106, 160)
    # place by place, f16 first at each: its logits are that place's reference
    assert [c[2] for c in engine.calls] == ["f16", "q4_0", "q8_0", "q8_0/q4_0"] * 4
    assert [c[3] for c in engine.calls[::4]] == [tokens[o + 100] for o in offsets]
    assert {c[1] for c in engine.calls} == {100}
    kl = {c.kv: c.kl for c in cells}
    assert list(kl) == ["f16", "q4_0", "q8_0", "q8_0/q4_0"]  # f16, the baseline, always
    assert kl["f16"] == 0.0 and 0 < kl["q8_0"] < kl["q8_0/q4_0"] < kl["q4_0"]
    f16, q4 = cells[0], cells[1]
    assert [r.offset for r in q4.continuations] == list(offsets)
    # 30 tokens of period 3: the last 15 repeat the first 15, at every place
    assert q4.looping == 4 and q4.longest_loop == 15 and q4.gen_tokens == 30
    assert q4.repeated_4gram > 0.8
    f16_loops = [tokens[o + 100] % 3 == 0 for o in offsets]
    assert [r.loops for r in f16.continuations] == f16_loops and 0 < sum(f16_loops) < 4
    assert cells[2].continuations == f16.continuations  # q8_0 generates as f16 does here


@pytest.fixture()
def fake_ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-file 'real' ladder in tmp_path, and a 300-token default text."""
    folder = tmp_path / "ladder"
    folder.mkdir()
    paths = {}
    for quant in ("F16", "Q8_0"):
        paths[quant] = folder / f"{quant}.gguf"
        paths[quant].write_bytes(quant.encode())
    monkeypatch.setattr(testmodels, "ensure_ladder", lambda *a, **k: paths)
    monkeypatch.setattr(testmodels, "ladder_dir", lambda *a, **k: folder)
    monkeypatch.setattr(kv_loss_measure, "pydoc_text", lambda: _text(299))
    monkeypatch.setattr(kv_loss_measure, "tokenize", fake_tokenize)
    monkeypatch.setattr(kv_loss_measure, "read_model_info",
                        lambda path: SimpleNamespace(context_length=256))
    monkeypatch.setattr(kv_loss_measure, "engine_build", lambda *a: BUILD)
    return folder


def test_cells_are_cached_per_build_and_other_builds_kept_beside(fake_ladder: Path) -> None:
    engine = FakeEngine()
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["f16,q4_0"]), (100, 200), 40,
                        20, positions=2)
    first = ensure_kv_quality(request, run=engine, build=BUILD)
    assert first.measured == 4 and len(engine.calls) == 8 and first.text_tokens == 300
    assert first.offsets == {100: (0, 160), 200: (0, 60)}
    again = ensure_kv_quality(request, run=engine, build=BUILD)
    assert again.measured == 0 and len(engine.calls) == 8 and again.cells == first.cells
    unrotated = EngineBuild("0.3.36", "0c1e570", "CPU : AVX2 = 1", kv_rotation=False)
    other = ensure_kv_quality(request, run=engine, build=unrotated)
    assert other.measured == 4
    stored = read_cache(fake_ladder / KV_QUALITY_FILE).values()
    assert sorted((c.build.kv_rotation, c.depth, c.kv) for c in stored) == sorted(
        (rot, d, kv) for rot in (True, False) for d in (100, 200) for kv in ("f16", "q4_0"))
    assert all(c.ladder_shas and c.sha256 in c.ladder_shas for c in stored)
    assert all(len(c.continuations) == 2 for c in stored)


def test_f16_is_kept_as_the_baseline_and_other_places_or_texts_are_measured_anew(
        fake_ladder: Path, tmp_path: Path) -> None:
    engine = FakeEngine()
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["q4_0"]), (100,), 40, 20,
                        positions=2)
    first = ensure_kv_quality(request, run=engine, build=BUILD)
    assert [c.kv for c in first.cells] == ["q4_0"] and first.measured == 1
    baseline = first.baselines[("Q8_0", 100)]
    assert baseline.kv == "f16" and len(baseline.continuations) == 2
    with_f16 = dataclasses.replace(request, kvs=parse_kv_types(["f16,q4_0"]))
    assert ensure_kv_quality(with_f16, run=engine, build=BUILD).measured == 0  # f16 cached
    calls = len(engine.calls)
    more = ensure_kv_quality(dataclasses.replace(request, positions=3), run=engine, build=BUILD)
    assert more.measured == 1 and len(engine.calls) == calls + 6  # 3 places, f16 and q4_0
    assert [r.offset for r in more.cells[0].continuations] == [0, 80, 160]
    own = tmp_path / "domain.txt"
    own.write_text(_text(299, seed=1))
    mine = ensure_kv_quality(dataclasses.replace(request, text_file=own), run=engine,
                             build=BUILD)
    assert mine.measured == 1 and mine.text.startswith("domain.txt@")
    assert mine.cells[0].text == mine.text != first.text
    assert mine.text_repetition is not None and mine.text_repetition.length == 20


@pytest.mark.parametrize(("args", "option"), [
    (["--kv", "q3_k"], "--kv"),
    (["--kv", "q8_0/bogus"], "--kv"),
    (["--depth", "0"], "--depth"),
    (["--depth", "261", "--positions", "1"], "--depth 261"),  # 261 + a window of 40 > 300
    (["--depth", "100"], "--depth 100"),  # 100 + 8 places x 40 > 300 tokens
    (["--depth", "100", "--positions", "0"], "--positions 0"),
    (["--kv", "q4_0", "--quant", "Q2_K"], "--quant Q2_K"),
    (["--depth", "200", "--gen-tokens", "60", "--positions", "1"], "trained context of 256"),
    (["--depth", "100", "--text", "missing.txt"], "--text missing.txt"),
    (["--depth", "100", "--text", "binary.bin"], "--text binary.bin: not UTF-8"),
    (["--depth", "100", "--text", "empty.txt"], "--text empty.txt: the file is empty"),
    (["--depth", "100", "--text", "short.txt", "--positions", "2"], "--text short.txt has 51"),
    (["--text", "short.txt"], "--text is an option of the KV cross"),
    (["--positions", "8"], "--positions is an option of the KV cross"),
])
def test_bad_input_is_one_line_exit_2_and_keeps_what_is_stored(
        fake_ladder: Path, args: list[str], option: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["q4_0"]), (100,), 40, 20,
                        positions=1)
    ensure_kv_quality(request, run=FakeEngine(), build=BUILD)
    stored = (fake_ladder / KV_QUALITY_FILE).read_bytes()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "binary.bin").write_bytes(b"w1 w2 \xff\xfe w3")
    (tmp_path / "empty.txt").write_text(" \n")
    (tmp_path / "short.txt").write_text(_text(50))
    result = run_analysis("quality", "--ladder", "gemma3-270m", "--window", "40", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in result.output
    assert (fake_ladder / KV_QUALITY_FILE).read_bytes() == stored


def test_the_command_prints_the_cross_as_json(fake_ladder: Path) -> None:
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["q8_0,q4_0"]), (100,),
                        20, 20, positions=8)
    ensure_kv_quality(request, run=FakeEngine(), build=BUILD)  # cached: the command reads it
    result = run_analysis("quality", "--ladder", "gemma3-270m", "--kv", "f16,q8_0,q4_0",
                          "--depth", "100", "--window", "20", "--gen-tokens", "20", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["measured_now"] == 0 and doc["build"]["kv_rotation"] is True
    assert doc["schema_version"] == 2 and doc["positions"]["per_depth"] == 8
    assert doc["positions"]["offsets"]["100"] == list(position_offsets(300, 100, 20, 8))
    assert doc["loop_definition"] == {"ngram": 4, "threshold": 0.5, "text": (
        "a continuation loops when at least 50% of its 4-grams occurred earlier in it")}
    assert doc["text_repetition"]["stretches"] == 14 and doc["text_repetition"]["length"] == 20
    cells = {c["kv"]: c for c in doc["cells"]}
    assert [(c["kv"], c["depth"]) for c in doc["cells"]] == [("f16", 100), ("q8_0", 100),
                                                             ("q4_0", 100)]
    assert cells["f16"]["kl"] == 0.0 and cells["q4_0"]["kl"] > cells["q8_0"]["kl"]
    f16, q4 = cells["f16"]["loops"], cells["q4_0"]["loops"]
    assert len(cells["q4_0"]["continuations"]) == q4["continuations"] == 8
    assert q4["looping"] == 8 and q4["loop_share"] == 1.0 and q4["median_repeated_4gram"] > 0.8
    assert q4["f16"] == {k: f16[k] for k in ("continuations", "looping", "loop_share",
                                            "median_repeated_4gram")}
    assert 0 < f16["looping"] < 8 and f16["loops_where_f16_does_not"] == 0
    assert q4["loops_where_f16_does_not"] == 8 - f16["looping"]
    assert q4["f16_loops_where_this_does_not"] == 0


def test_the_table_shows_loop_shares_beside_f16s_and_what_looping_means(
        fake_ladder: Path) -> None:
    request = KvRequest("gemma3-270m", ("Q8_0",), parse_kv_types(["q4_0"]), (100,), 20, 20)
    ensure_kv_quality(request, run=FakeEngine(), build=BUILD)  # 8 places: the default
    result = run_analysis("quality", "--ladder", "gemma3-270m", "--kv", "q4_0", "--depth", "100",
                          "--window", "20", "--gen-tokens", "20")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "q4_0" in line and "100" in line)
    tokens = fake_tokenize(Path(), _text(299))  # f16 loops where the depth's token is 3k
    f16 = sum(tokens[o + 100] % 3 == 0 for o in position_offsets(300, 100, 20, 8))
    assert 0 < f16 < 8 and "8 of 8" in row and f"{f16} of 8" in row
    assert "at least 50% of its 4-grams occurred earlier in it" in result.stdout
    assert "the text itself: 0 of its 14 stretches of 20 tokens" in result.stdout
    assert "0 cells measured now, 1 cached" in result.stdout


def test_the_tiny_model_is_decoded_at_every_place(tiny_ladder: dict[str, Path]) -> None:
    """The real decoding's mechanics on the synthetic model (gibberish, so no figure is judged):
    each place continues its own text, f16 matches itself, q4_0 is scored against it."""
    path = tiny_ladder["Q8_0"]
    tokens = tokenize(path, " ".join(pydoc_text().split()[:400]))
    depth, window, positions = 48, 8, 3
    assert len(tokens) >= depth + positions * window
    kvs = parse_kv_types(["q4_0"])
    cells = {c.kv: c for c in measure_cells(path, "Q8_0", "sha", tokens, kvs, depth,
                                            window=window, gen_tokens=12, text="t", build=BUILD,
                                            positions=positions, run=llama_cell)}
    f16, q4 = cells["f16"], cells["q4_0"]
    assert f16.kl == 0.0 and f16.top1 == 1.0 and q4.kl >= 0.0 and q4.ppl > 1
    offsets = position_offsets(len(tokens), depth, window, positions)
    assert [r.offset for r in q4.continuations] == list(offsets) and offsets[-1] > offsets[0]
    assert all(1 <= r.gen_tokens <= 12 for r in (*f16.continuations, *q4.continuations))


@pytest.mark.slow
def test_on_gemma_a_q4_0_cache_drifts_from_f16_and_f16_matches_itself(
        gemma_ladder: dict[str, Path]) -> None:
    path = gemma_ladder["Q8_0"]
    tokens = tokenize(path, pydoc_text())
    assert len(tokens) > 50_000  # the text is long enough for depths beyond 6k
    kvs = parse_kv_types(["f16,q4_0"])
    build = kv_loss_measure.engine_build({})
    # two places of 256 tokens: the cost of one place of 512 before places were counted
    cells = {c.kv: c for c in measure_cells(path, "Q8_0", "sha", tokens, kvs, 256, window=64,
                                            gen_tokens=24, text="t", build=build, positions=2)}
    f16, q4 = cells["f16"], cells["q4_0"]
    assert f16.kl == 0.0 and f16.top1 == 1.0 and f16.kl_max == 0.0
    assert q4.kl > 0 and q4.kl_max >= q4.kl and q4.top1 <= 1.0
    assert 1 < f16.ppl < 1000 and 1 < q4.ppl < 1000  # English, far better than chance
    assert f16.gen_tokens >= 1 and 0.0 <= q4.repeated_4gram <= 1.0
    # the text's start and its end: two different continuations
    assert [r.offset for r in f16.continuations] == [0, len(tokens) - 256 - 64]
    assert build.kv_rotation and build.llama_cpp_python
