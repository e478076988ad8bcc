"""Quality on a real text: the windows that score it, and the real ladder read through them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis import quality
from harness.analysis.quality import _windows, gemma_terms_text, measure_text


def test_windows_score_every_position_after_the_first_half_window_once() -> None:
    for n_tokens in (512, 700, 1000, 1981, 2048):
        targets: list[int] = []
        for start, first in _windows(n_tokens, 512):
            assert first >= 255  # each prediction has seen at least 256 tokens
            targets += range(start + first + 1, start + 512)
        assert targets == list(range(256, n_tokens))
    assert _windows(300, 512) == []


def test_a_perfect_copy_has_no_divergence_and_its_perplexity_is_the_references(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    vocab = 16
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, vocab, 40)]
    monkeypatch.setattr(quality, "tokenize", lambda path, text: tokens)

    def logits(path: Path, chunk: list[int], n_ctx: int) -> np.ndarray:
        rng = np.random.default_rng(len(chunk) + chunk[0])
        base = rng.normal(size=(len(chunk), vocab)).astype(np.float32)
        return base * (0.5 if path.name == "noisy" else 1.0)

    paths = {"F16": tmp_path / "ref", "Q8_0": tmp_path / "copy", "Q2_K": tmp_path / "noisy"}
    scores = {s.quant: s for s in measure_text(paths, "text", window=16, logits=logits,
                                               shas={q: q for q in paths})}
    assert scores["Q8_0"].kl == pytest.approx(0.0, abs=1e-6) and scores["Q8_0"].top1 == 1.0
    assert scores["Q8_0"].ppl == pytest.approx(scores["F16"].ppl)
    assert scores["Q2_K"].kl > 0.01 and scores["F16"].positions == 40 - 8
    assert scores["F16"].text is not None and scores["F16"].text.startswith("gemma-terms@")


@pytest.mark.slow
def test_the_gemma_terms_are_several_paragraphs_of_english() -> None:
    text = gemma_terms_text()
    assert text.count("\n\n") > 50 and "Gemma Terms of Use" in text
    assert len(text.split()) > 1200 and "<" not in text


@pytest.mark.slow
def test_on_the_real_ladder_fewer_bits_drift_further_from_f16(
        gemma_ladder: dict[str, Path]) -> None:
    paths = {q: gemma_ladder[q] for q in ("F16", "Q8_0", "Q2_K")}
    scores = {s.quant: s for s in measure_text(paths, gemma_terms_text(), max_windows=1)}
    assert scores["F16"].kl == 0.0 and scores["F16"].positions == 256
    assert 0 < scores["Q8_0"].kl < scores["Q2_K"].kl
    assert scores["Q8_0"].top1 > scores["Q2_K"].top1
    # a language model reading English: far better than chance over a 262k vocabulary
    assert all(1 < s.ppl < 1000 for s in scores.values() if s.ppl is not None)
    assert math.isfinite(scores["Q2_K"].ppl or math.inf)
