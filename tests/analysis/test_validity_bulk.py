"""The report's validity table, grouped once over the frame, against the per-candidate
selection it replaced (``validity_reference``), on random stores: every count, reason, median
and label the same to the bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.analysis.validity_table import validity

from . import validity_reference as reference
from .test_recommend_bulk import _plain, _store

REASONS = ("decode faster than memory", "pp above roofline; tg above roofline",
           "output mismatch against ref: 3 of 16", " ; ", None)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_grouped_validity_matches_the_per_candidate_one(tmp_path: Path, seed: int) -> None:
    frame = _store(tmp_path, seed)
    rng = np.random.default_rng(seed)
    invalid = (frame["valid"].astype(object) == False).to_numpy()  # noqa: E712 - nullable
    frame.loc[invalid, "invalid_reason"] = [REASONS[i] for i in
                                            rng.integers(0, len(REASONS), invalid.sum())]
    new, old = validity(frame), reference.validity(frame)
    assert _plain(new)[1] == _plain(old)[1]
    assert len(old.rows) >= 5 and old.invalid > len(old.rows)  # groups with several invalid
    assert any(len(r.reasons) > 1 for r in old.rows)  # a joined reason was split
    assert old.output.total > 0 and old.output.reasons


def test_no_checked_trial_gives_an_empty_table(tmp_path: Path) -> None:
    frame = _store(tmp_path, 4)
    frame["valid"] = None
    new, old = validity(frame), reference.validity(frame)
    assert _plain(new)[1] == _plain(old)[1] and not new.rows and new.checked == 0
