"""KL divergence and top-1 agreement: pure maths first, then the real tiny ladder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis import quality
from harness.analysis.quality import (
    QualityScore,
    ensure_quality,
    kl_per_position,
    measure_ladder,
    quality_for_trials,
    token_sequence,
    top1_agreement,
)


def test_kl_of_identical_logits_is_zero_and_shift_invariant() -> None:
    logits = np.random.default_rng(0).normal(size=(5, 10))
    assert np.allclose(kl_per_position(logits, logits), 0.0)
    assert np.allclose(kl_per_position(logits, logits + 3.0), 0.0)  # softmax ignores a shift


def test_kl_matches_the_closed_form_for_two_outcomes() -> None:
    p, q = 0.8, 0.5
    ref = np.log([[p, 1 - p]])
    cand = np.log([[q, 1 - q]])
    expected = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    assert kl_per_position(ref, cand)[0] == pytest.approx(expected)


def test_top1_agreement_counts_matching_argmax_positions() -> None:
    ref = np.array([[0, 1.0], [2.0, 0], [0, 3.0], [1.0, 0]])
    cand = np.array([[0, 2.0], [0, 1.0], [0, 1.0], [1.0, 0]])
    assert top1_agreement(ref, cand) == 0.75


def test_token_sequence_is_fixed_by_its_seed() -> None:
    a = token_sequence(1000, 32, seed=5)
    assert a == token_sequence(1000, 32, seed=5)
    assert a != token_sequence(1000, 32, seed=6)
    assert a[0] == 1 and all(3 <= t < 1000 for t in a[1:]) and len(a) == 32


def test_tiny_ladder_quality_orders_quants_by_precision(tiny_ladder: dict[str, Path]) -> None:
    paths = {q: tiny_ladder[q] for q in ("F16", "Q8_0", "Q2_K")}
    scores = {s.quant: s for s in measure_ladder(paths, n_tokens=48)}
    assert scores["F16"].kl == 0.0 and scores["F16"].top1 == 1.0
    assert scores["Q8_0"].kl < scores["Q2_K"].kl
    assert scores["Q8_0"].top1 >= 0.9
    assert scores["Q8_0"].positions == 48


def test_results_are_cached_beside_the_models_by_sha256(
        tiny_ladder: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.artifacts import testmodels

    subset = {q: tiny_ladder[q] for q in ("F16", "Q8_0")}
    monkeypatch.setattr(testmodels, "ensure_ladder",
                        lambda size, cache_dir=None, progress=None: subset)
    monkeypatch.setattr(testmodels, "ladder_dir", lambda size, cache_dir=None: tmp_path)
    calls: list[str] = []

    def fake_logits(path: Path, tokens: list[int], n_ctx: int) -> np.ndarray:
        calls.append(path.name)
        rng = np.random.default_rng(len(calls))
        return rng.normal(size=(len(tokens), 8))

    scores, file, measured = ensure_quality("tiny", n_tokens=16, logits=fake_logits)
    assert measured and len(calls) == 2 and file == tmp_path / "quality.json"
    data = json.loads(file.read_text())
    assert [s["quant"] for s in data["scores"]] == ["F16", "Q8_0"]
    again, _, measured_again = ensure_quality("tiny", n_tokens=16, logits=fake_logits)
    assert not measured_again and len(calls) == 2 and again == scores
    _, _, remeasured = ensure_quality("tiny", n_tokens=24, logits=fake_logits)
    assert remeasured  # other token settings are another key


def test_scores_map_to_trials_by_model_sha256() -> None:
    score = QualityScore("Q8_0", "aa" * 32, 0.01, 0.1, 0.9, 64, "F16")
    trials = pd.DataFrame({"model_name": ["tiny", "other"], "quant": ["Q8_0", "Q8_0"],
                           "model_sha256": ["aa" * 32, "bb" * 32]})
    assert quality.quality_for_trials(trials, {score.sha256: score}) == {("tiny", "Q8_0"): score}
    assert quality_for_trials(trials, {}) == {}
