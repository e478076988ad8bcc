#!/usr/bin/env python3
"""How good are the regression verdicts and the change-point detector? A benchmark, not a test.

Monte Carlo on synthetic lognormal trials (issue 9, item 6):

* power: share of comparisons called ``regression`` when the candidate is 5% slower, at 3% CV,
  10 repetitions per build (target >= 95%);
* false alarms: share of A/A comparisons (same distribution) called ``regression``
  (target <= 1%); the share called either ``regression`` or ``improvement`` is shown too;
* power with throttling: each trial is throttled with probability 10% and excluded before the
  comparison, as ``compare`` does (target >= 90%);
* history delay: nights after a 5% step (2% night-level noise, 30 quiet nights before it) until
  the detector, re-run every night on the series so far, reports it within 3 nights of the truth;
  also how often the step is placed within one night once 30 nights after it are known, and how
  often the 30 quiet nights alone raise an alarm.

Adaptive repetitions (issue 17): the sequential rule of ``harness.analysis.sequential`` is run pair
by pair (interleaved A/B, at least 5 and at most 30 per build) on the same kind of draws: power on
a 5% drop at 3% CV (target >= 95%), A/A false regressions (target <= 1%), power with 10% of trials
throttled and *kept* as slow outliers, 20-40% slower (target >= 90%), the mean repetitions per
build over the drop and A/A runs (target <= 16) and the cap (<= 30). The fixed-n rows stay beside
them for comparison.

Both fixed-n verdict rules are measured on the same draws: the default (significant, interval on
the bad side of 1, estimate beyond the band) and ``strict`` (the whole interval beyond the
band). Each rate carries a 95% Clopper-Pearson interval of its Monte Carlo error. Also printed:
the best any test can do (a z-test on log means with the variance known), which bounds what is
reachable.

    .venv/bin/python scripts/bench_detector.py            # quick (1000 draws), under a minute
    .venv/bin/python scripts/bench_detector.py --full     # 10x the draws, several minutes
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from scipy import stats as sps

from harness.analysis.changepoints import detect_change_points
from harness.analysis.compare import Policy, decide, measure
from harness.analysis.sequential import SequentialRule, next_step

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results" / "detector.json"
CV = 0.03
DROP = 0.05
REPS = 10
THROTTLE_P = 0.10
SLOW = (0.60, 0.85)  # a throttled trial kept in the adaptive samples runs at this share of speed
TOLERANCE = 3  # nights: a report "around night N" counts as found for the delay


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    target: str
    met: bool | None
    low: float | None = None
    high: float | None = None
    note: str = ""


def lognormal(rng: np.random.Generator, n: int, median: float, cv: float) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    return median * np.exp(rng.normal(0.0, sigma, n))


def rate_ci(hits: int, trials: int) -> tuple[float, float, float]:
    ci = sps.binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return hits / trials, float(ci.low), float(ci.high)


def verdict_rates(
    rng: np.random.Generator, trials: int, factor: float, reps: int, throttle_p: float = 0.0
) -> dict[str, dict[str, int]]:
    """Count verdicts of both rules over ``trials`` simulated comparisons."""
    default = Policy(higher_is_better=True)
    strict = Policy(higher_is_better=True, strict=True)
    counts: dict[str, dict[str, int]] = {"default": {}, "strict": {}}
    for i in range(trials):
        throttled = rng.binomial(reps, throttle_p, size=2) if throttle_p else np.zeros(2, int)
        base = lognormal(rng, reps - int(throttled[0]), 100.0, CV)
        cand = lognormal(rng, reps - int(throttled[1]), 100.0 * factor, CV)
        m = measure(
            base,
            cand,
            Policy(higher_is_better=True, seed=i),
            throttled_baseline=int(throttled[0]),
            throttled_candidate=int(throttled[1]),
        )
        for name, policy in (("default", default), ("strict", strict)):
            verdict = decide(m, m.p_value, policy).verdict
            counts[name][verdict] = counts[name].get(verdict, 0) + 1
    return counts


def adaptive_runs(
    rng: np.random.Generator, trials: int, factor: float, throttle_p: float = 0.0
) -> tuple[dict[str, int], list[int]]:
    """Run the sequential rule pair by pair on ``trials`` simulated A/B comparisons.

    Throttled trials are *kept* here, as slow outliers (20-40% slower), not excluded: the worse
    case, where the throttle flag was missed. Returns the verdict counts and the repetitions per
    build each comparison spent."""
    rule = SequentialRule()
    counts: dict[str, int] = {}
    spent: list[int] = []
    for _ in range(trials):
        sides = [
            lognormal(rng, rule.max_n, 100.0, CV),
            lognormal(rng, rule.max_n, 100.0 * factor, CV),
        ]
        if throttle_p:
            for side in sides:
                hit = rng.random(rule.max_n) < throttle_p
                side[hit] *= rng.uniform(*SLOW, size=int(hit.sum()))
        base, cand = (side.tolist() for side in sides)
        for n in range(1, rule.max_n + 1):
            decision = next_step(base[:n], cand[:n], rule)
            if decision.settled:
                break
        counts[decision.step] = counts.get(decision.step, 0) + 1
        spent.append(n)
    return counts, spent


def optimal_power(reps: int, one_sided_alpha: float) -> float:
    """Power of a z-test on the mean of logs with sigma known: no test on these data does better."""
    sigma = math.sqrt(math.log1p(CV**2))
    shift = -math.log1p(-DROP) / (sigma * math.sqrt(2.0 / reps))
    return float(sps.norm.cdf(shift - sps.norm.ppf(1 - one_sided_alpha)))


def history_delays(
    rng: np.random.Generator, seeds: int, quiet: int = 30, horizon: int = 30
) -> tuple[list[int | None], int, int]:
    """Per series: nights after the step until it is reported within ``TOLERANCE`` nights (None:
    not within ``horizon``); then how many series raised an alarm in the quiet nights, and how
    many placed the step within one night of the truth once all ``horizon`` nights were seen."""
    delays: list[int | None] = []
    early = exact = 0
    for _ in range(seeds):
        level = np.r_[np.full(quiet, 100.0), np.full(horizon, 100.0 * (1 - DROP))]
        series = level * (1 + rng.normal(0.0, 0.02, level.size))
        early += bool(detect_change_points(series[:quiet]))
        exact += any(abs(cp.index - quiet) <= 1 for cp in detect_change_points(series))
        found = None
        for after in range(1, horizon + 1):
            points = detect_change_points(series[: quiet + after])
            if any(abs(cp.index - quiet) <= TOLERANCE for cp in points):
                found = after
                break
        delays.append(found)
    return delays, early, exact


def run(trials: int, seeds: int, seed: int) -> tuple[list[Figure], dict[str, object]]:
    rng = np.random.default_rng(seed)
    drop = verdict_rates(rng, trials, 1 - DROP, REPS)
    same = verdict_rates(rng, trials, 1.0, REPS)
    throttled = verdict_rates(rng, trials, 1 - DROP, REPS, THROTTLE_P)
    by_reps = {n: verdict_rates(rng, trials // 2, 1 - DROP, n) for n in (15, 20)}
    figures: list[Figure] = []

    def add(name: str, counts: dict[str, int], verdicts: set[str], target: str, check: str) -> None:
        total = sum(counts.values())
        hits = sum(counts.get(v, 0) for v in verdicts)
        value, low, high = rate_ci(hits, total)
        met: bool | None = None
        if check.startswith(">="):
            met = value >= float(check[2:])
        elif check.startswith("<="):
            met = value <= float(check[2:])
        figures.append(Figure(name, value, target, met, low, high, f"{hits}/{total}"))

    for rule in ("default", "strict"):
        add(f"power, 5% drop, n=10 [{rule}]", drop[rule], {"regression"}, ">= 95%", ">=0.95")
        add(f"A/A false regression [{rule}]", same[rule], {"regression"}, "<= 1%", "<=0.01")
        add(
            f"A/A any false change [{rule}]",
            same[rule],
            {"regression", "improvement"},
            "(info)",
            "",
        )
        add(
            f"power, 10% throttled [{rule}]",
            throttled[rule],
            {"regression"},
            ">= 90%",
            ">=0.90",
        )
    for n, counts in by_reps.items():
        add(f"power, 5% drop, n={n} [default]", counts["default"], {"regression"}, "(info)", "")
    figures.append(
        Figure(
            "bound: best power at 1% false alarms, n=10", optimal_power(REPS, 0.01), "(info)", None
        )
    )
    figures.append(
        Figure(
            "bound: false alarms at 95% power, n=10", _alarm_at_power(REPS, 0.95), "(info)", None
        )
    )

    rule = SequentialRule()
    seq_rng = np.random.default_rng((seed, 17))  # its own stream: the fixed-n rows are unchanged
    seq = {
        "drop": adaptive_runs(seq_rng, trials, 1 - DROP),
        "aa": adaptive_runs(seq_rng, trials, 1.0),
        "throttled": adaptive_runs(seq_rng, trials, 1 - DROP, THROTTLE_P),
        "aa_throttled": adaptive_runs(seq_rng, trials, 1.0, THROTTLE_P),
    }
    tag = f"[adaptive, n<={rule.max_n}]"
    add(f"power, 5% drop {tag}", seq["drop"][0], {"regression"}, ">= 95%", ">=0.95")
    add(f"A/A false regression {tag}", seq["aa"][0], {"regression"}, "<= 1%", "<=0.01")
    add(f"A/A any false change {tag}", seq["aa"][0], {"regression", "improvement"}, "(info)", "")
    add(f"power, 10% throttled kept {tag}", seq["throttled"][0], {"regression"}, ">= 90%",
        ">=0.90")
    add(f"A/A false regr., 10% throttled {tag}", seq["aa_throttled"][0], {"regression"},
        "<= 1%", "<=0.01")
    add(f"A/A called same {tag}", seq["aa"][0], {"same"}, "(info)", "")
    add(f"5% drop unstable at cap {tag}", seq["drop"][0], {"unstable"}, "(info)", "")
    mean_reps = float(np.mean(seq["drop"][1] + seq["aa"][1]))
    figures.append(
        Figure(
            f"repetitions per build, mean {tag}",
            mean_reps,
            "<= 16",
            mean_reps <= 16,
            note="over the 5% drop and A/A runs",
        )
    )
    for key, label in (("drop", "5% drop"), ("aa", "A/A"), ("throttled", "throttled")):
        figures.append(
            Figure(
                f"repetitions per build, {label}, mean/p90",
                float(np.mean(seq[key][1])),
                "(info)",
                None,
                note=f"p90 {np.percentile(seq[key][1], 90):.0f}",
            )
        )
    figures.append(
        Figure(f"repetitions per build, cap {tag}", float(rule.max_n), "<= 30", rule.max_n <= 30)
    )

    delays, early, exact = history_delays(rng, seeds)
    found = [d for d in delays if d is not None]
    detected, low, high = rate_ci(len(found), len(delays))
    figures.append(
        Figure("history: 5% step found within 30 nights", detected, "(info)", None, low, high)
    )
    if found:
        figures.append(
            Figure("history: delay in nights, median", float(np.median(found)), "(info)", None)
        )
        figures.append(
            Figure(
                "history: delay in nights, 90th pct",
                float(np.percentile(found, 90)),
                "(info)",
                None,
            )
        )
    on_night, low, high = rate_ci(exact, len(delays))
    figures.append(
        Figure("history: step placed within ±1 night (60)", on_night, "(info)", None, low, high)
    )
    early_rate, low, high = rate_ci(early, len(delays))
    figures.append(
        Figure("history: alarm in 30 quiet nights", early_rate, "(info)", None, low, high)
    )
    raw: dict[str, object] = {
        "verdicts": {
            "drop_n10": drop,
            "aa_n10": same,
            "throttled_n10": throttled,
            **{f"drop_n{n}": c for n, c in by_reps.items()},
        },
        "history_delays": delays,
        "adaptive": {
            "rule": rule.__dict__,
            "verdicts": {key: counts for key, (counts, _) in seq.items()},
            "repetitions": {key: spent for key, (_, spent) in seq.items()},
        },
    }
    return figures, raw


def _alarm_at_power(reps: int, power: float) -> float:
    sigma = math.sqrt(math.log1p(CV**2))
    shift = -math.log1p(-DROP) / (sigma * math.sqrt(2.0 / reps))
    return float(1 - sps.norm.cdf(shift - sps.norm.ppf(power)))


def fmt(f: Figure) -> str:
    percent = not f.name.startswith(("history: delay", "repetitions"))
    value = f"{f.value:.1%}" if percent else f"{f.value:.1f}"
    interval = f"[{f.low:.1%}, {f.high:.1%}]" if f.low is not None and f.high is not None else ""
    met = {True: "yes", False: "NO", None: ""}[f.met]
    return f"{f.name:<52} {value:>7} {interval:>17} {f.target:>8} {met:>4}  {f.note}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="10x the draws (a few minutes)")
    parser.add_argument("--trials", type=int, help="comparisons per scenario (default 1000/10000)")
    parser.add_argument("--seeds", type=int, help="history series (default 100/500)")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    args = parser.parse_args()
    trials = args.trials or (10_000 if args.full else 1000)
    seeds = args.seeds or (500 if args.full else 100)
    started = time.perf_counter()
    figures, raw = run(trials, seeds, args.seed)
    elapsed = time.perf_counter() - started
    doc = {
        "benchmark": "detector",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "full" if args.full else "quick",
        "params": {
            "cv": CV,
            "drop": DROP,
            "reps": REPS,
            "throttle_p": THROTTLE_P,
            "adaptive_slow_throttled": list(SLOW),
            "trials": trials,
            "history_seeds": seeds,
            "night_noise": 0.02,
            "seed": args.seed,
        },
        "figures": [f.__dict__ for f in figures],
        "raw": raw,
        "elapsed_s": round(elapsed, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{'figure':<52} {'value':>7} {'95% MC interval':>17} {'target':>8} {'met':>4}")
    for f in figures:
        print(fmt(f))
    print(
        f"\n{trials} comparisons per scenario, {seeds} history series, {elapsed:.0f} s; "
        f"wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
