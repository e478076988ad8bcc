"""The comparison window: the newest usable trials per side, and only their throttled peers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report.trends import comparison


def _trials(build: str, start: str, n: int, throttled_every: int, level: float) -> pd.DataFrame:
    times = pd.date_range(start, periods=n, freq="h", tz="UTC")
    throttled = np.arange(n) % throttled_every == 0
    rng = np.random.default_rng(len(build) + n)
    return pd.DataFrame({
        "device": "phone", "config": "Q4_0", "build_id": build, "started_at": times,
        "ok": True, "throttled": throttled, "tg_tps": level * rng.lognormal(0, 0.01, n),
        "pp_tps": 100 * level * rng.lognormal(0, 0.01, n), "peak_pss_bytes": 1e9,
    })


def test_window_takes_newest_usable_trials_and_counts_throttled_among_them() -> None:
    # baseline: 40 trials, every 4th throttled; candidate 8% slower, every 2nd throttled
    df = pd.concat([_trials("base", "2026-01-01", 40, 4, 10.0),
                    _trials("cand", "2026-02-01", 40, 2, 9.2)], ignore_index=True)
    for column in ("device", "config", "build_id"):
        df[column] = df[column].astype("category")
    section = comparison(df, None, None, max_per_side=10)
    assert (section.baseline, section.candidate) == ("base", "cand")
    tg = next(r for r in section.rows if r.metric == "tg_tps")
    assert (tg.n_baseline, tg.n_candidate) == (10, 10)
    def throttled_in_window(build: str) -> int:
        side = df[df.build_id == build].sort_values("started_at", ascending=False)
        usable_before = (~side.throttled).cumsum() - (~side.throttled)
        return int(side[usable_before < 10].throttled.sum())

    # throttled among the newest trials until 10 usable were seen, not all 10 or 20 of them
    assert (throttled_in_window("base"), throttled_in_window("cand")) == (3, 9)
    assert "excluded throttled trials: baseline 3, candidate 9" in tg.reason
    assert tg.verdict == "regression"
