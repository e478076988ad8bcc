"""Items 1, 4 and half of 2: sampler cost, harness overhead per trial, repeat-run pushes.

One virtual phone, one trial at a time (the host has 2 cores; a threads=1 cell leaves the other
to the phone daemon, the adb server and the harness). Each round runs the same bench-ladder cell
with the sampler at its default interval, with no sampler, (some rounds) at 10 Hz, and (some
rounds) the same llama-bench command directly on the host with no harness at all; the order
rotates every round so slow drift in the machine's load hits every arm alike. Ratios are taken
within a round, then summarised over rounds.

Trial against trial, this host cannot see a 1% cost: one launch's generation rate differs from
the next one's by 12-21% (CV). So the figure's target row comes from ``bench.interleave``: one
launch of the same engine command, the sampler switched on and off block by block, with a
placebo arm (the switch without a sampler) beside it as the noise floor.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from bench import interleave
from bench.common import MATRICES, Figure, Lab, Timeline, iqr_text, mean_ci, summarize
from bench.overhead import breakdown

MATRIX = MATRICES / "sampler.yaml"  # quick: ~1 s of generation, inside the 2 s fast start
LONG = MATRICES / "sampler-long.yaml"  # full: ~4 s of generation, mostly at the set interval
TEN_HZ = 0.1
ARMS = ("default", "none", "10hz", "direct")
BLOCK = 8  # repetitions per block of the one-launch figure (~1.8 s: about the fast start)
N_GEN = 32  # tokens per repetition


def default_interval() -> float:
    """The interval a user gets from ``harness run`` without options."""
    from harness.run.runner import RunOptions

    value = {f.name: f.default for f in fields(RunOptions)}["sample_interval_s"]
    assert isinstance(value, float)
    return value


def round_arms(index: int, ten_hz: bool, direct: bool) -> list[str]:
    """The arms of round ``index``, rotated by the round number (pure, tested)."""
    arms = [a for a in ARMS if (a != "10hz" or ten_hz) and (a != "direct" or direct)]
    shift = index % len(arms)
    return arms[shift:] + arms[:shift]


def engine_seconds(engine_record: str | None) -> float | None:
    """The engine's own measured time: the sum of llama-bench's samples_ns over its tests."""
    if not engine_record:
        return None
    total = sum(sum(r.get("samples_ns") or []) for r in json.loads(engine_record))
    return total / 1e9 if total else None


def direct_command(lab: Lab, matrix: Path) -> list[str]:
    """The exact llama-bench command of the matrix's cell, with host paths (no harness)."""
    from harness.artifacts.builds import open_build
    from harness.artifacts.testmodels import ensure_ladder
    from harness.engines.llama_bench import LlamaBench
    from harness.matrix import expand, load_matrix

    (cell,) = expand(load_matrix(matrix))
    build = open_build(lab.builds, cell.build)
    model = ensure_ladder("bench")[cell.quant]
    return LlamaBench().argv(cell, str(build.binary()), str(model))


def run_direct(argv: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-direct-") as cwd:
        start = time.monotonic()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                              check=False)
        wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"llama-bench failed on the host: {done.stderr[-1500:]}")
    from harness.engines.llama_bench import parse_output

    tg = [r.avg_ts for r in parse_output(done.stdout) if r.kind == "tg"]
    return {"wall_s": wall, "tg_tps": float(tg[0]) if tg and tg[0] else None}


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    rounds = 10 if quick else 12  # across launches: information (the target row is one launch)
    every = 2 if quick else 1  # 10 Hz and direct arms: every other round in quick mode
    device = lab.devices(1)[0]
    results = lab.work / "sampler-results"
    interval = {"default": default_interval(), "none": 0.0, "10hz": TEN_HZ}
    matrix = MATRIX if quick else LONG
    argv = direct_command(lab, matrix)

    with interleave.capture() as launch:  # warm-up: pushes, caches; and the engine command
        first = lab.run(matrix, [device], results, interval["default"])
    first_pushed = sum(d.bytes_pushed for d in first.devices)
    rows: list[dict[str, Any]] = []
    for index in range(rounds):
        arms = round_arms(index, ten_hz=index % every == 0, direct=index % every == 0)
        for arm in arms:
            row: dict[str, Any] = {"round": index, "arm": arm}
            if arm == "direct":
                row.update(run_direct(argv))
            else:
                timeline = Timeline()
                summary = lab.run(matrix, [device], results, interval[arm], timeline)
                spans = timeline.trial_spans()
                row.update(run_id=summary.run_id, run_wall_s=summary.wall_s,
                           bytes_pushed=sum(d.bytes_pushed for d in summary.devices),
                           outcome=spans[0]["outcome"] if spans else None,
                           tg_tps=spans[0]["tg_tps"] if spans else None,
                           span_s=spans[0]["span_s"] if spans else None,
                           timings=spans[0].get("timings") if spans else None)
            rows.append(row)
    _join_store(rows, results)
    blocks, one_launch = interleave.run(device, launch, 30 if quick else 160, BLOCK, N_GEN)
    context = ("trials inside the 2 s fast start (memory lines every 200 ms)" if quick
               else "generation outlasts the 2 s fast start")
    figures = _launch_figures(blocks) + _figures(rows, first_pushed, interval["default"], context)
    return figures, {
        "rounds": rounds, "matrix": str(matrix.relative_to(matrix.parents[2])),
        "direct_argv": argv, "first_run_bytes_pushed": first_pushed, "trials": rows,
        "one_launch": one_launch}


def _mean_text(values: list[float]) -> str:
    if not values:
        return "n/a"
    low, high = mean_ci(values)
    return f"{sum(values) / len(values):.3f} (CI95 {low:.3f}-{high:.3f}, n={len(values)})"


def _launch_figures(blocks: list[interleave.Block]) -> list[Figure]:
    """Figure 1's target row: the sampler's cost within one launch, with its placebo beside."""
    sched = interleave.paired_ratios(blocks, "sched_tps")
    wall = interleave.paired_ratios(blocks, "tps")
    steal = [b.steal_share for b in blocks if b.steal_share is not None]
    cpu = [b.sampler_cpu for b in blocks if b.sampler_cpu is not None]
    out = []
    for arm, target in (("default", 0.99), ("placebo", None)):
        values = sched.get(arm, [])
        mean = sum(values) / len(values) if values else None
        low, high = mean_ci(values) if values else (None, None)
        note = (f"CI95 of the mean {low:.3f}-{high:.3f}; " if low is not None else "")
        if target:
            note += (f"placebo (the switch, no sampler) {_mean_text(sched.get('placebo', []))}; "
                     f"wall-clock rate {_mean_text(wall.get(arm, []))}, its placebo "
                     f"{_mean_text(wall.get('placebo', []))}; host steal "
                     f"{100 * statistics.mean(steal) if steal else float('nan'):.0f}% of a CPU "
                     f"per second; sampler CPU / engine CPU per block "
                     f"{statistics.mean(cpu) if cpu else float('nan'):.4f}; a fresh sampler "
                     f"every block of {BLOCK} x {N_GEN} tokens")
        else:
            note += "the noise floor of the row above: blocks switched with no sampler started"
        out.append(Figure(
            f"1 sampler: tg ratio {arm} / none, one launch", mean, "ratio",
            iqr_text(values), ">= 0.99" if target else "(info)",
            None if target is None or mean is None else mean >= target, note))
    return out


def _join_store(rows: list[dict[str, Any]], results: Path) -> None:
    """Add each trial's stored wall_s and the engine's own time (samples_ns) to its row."""
    from harness import store

    trials = store.read_table(results, "trials").set_index("run_id")
    samples = store.read_table(results, "samples")
    sampled = samples[samples["source"] == "device-sampler"].groupby("trial_id")["rss_bytes"]
    peaks = sampled.max().to_dict()
    for row in rows:
        if row.get("run_id") in trials.index:
            stored = trials.loc[row["run_id"]]
            row["trial_wall_s"] = float(stored["wall_s"])
            row["engine_s"] = engine_seconds(stored["engine_record"])
            hwm, top = stored["vm_hwm_bytes"], peaks.get(stored["trial_id"])
            row["peak_over_hwm"] = (float(top) / float(hwm)
                                    if top is not None and hwm is not None and hwm > 0 else None)
            for key in ("sampler_cpu_s", "engine_cpu_s"):
                value = stored[key]
                row[key] = None if value is None or value != value else float(value)


def _by_round(rows: list[dict[str, Any]], arm: str, key: str) -> dict[int, float]:
    return {r["round"]: float(r[key]) for r in rows
            if r["arm"] == arm and r.get(key) is not None and r.get("outcome", "ok") == "ok"}


def ratios(rows: list[dict[str, Any]], arm: str, base: str = "none") -> list[float]:
    """tg tok/s of ``arm`` over ``base`` within each round that has both (pure, tested)."""
    a, b = _by_round(rows, arm, "tg_tps"), _by_round(rows, base, "tg_tps")
    return [a[i] / b[i] for i in sorted(a) if i in b and b[i] > 0]


def cpu_shares(rows: list[dict[str, Any]]) -> list[float]:
    """The sampler's CPU time over the engine's, per default trial that has both (pure)."""
    return [r["sampler_cpu_s"] / r["engine_cpu_s"] for r in rows
            if r["arm"] == "default" and r.get("sampler_cpu_s") is not None
            and r.get("engine_cpu_s")]


def cpu_share_total(rows: list[dict[str, Any]]) -> float | None:
    """All default trials' sampler CPU over their engine CPU: one ratio of sums, so the 10 ms
    ticks of /proc stat average out (pure)."""
    both = [r for r in rows if r["arm"] == "default" and r.get("sampler_cpu_s") is not None
            and r.get("engine_cpu_s")]
    engine = sum(r["engine_cpu_s"] for r in both)
    return sum(r["sampler_cpu_s"] for r in both) / engine if engine else None


def overheads(rows: list[dict[str, Any]]) -> list[float]:
    """Per round: the harness's span of a default trial minus the bare engine's wall time."""
    span, direct = _by_round(rows, "default", "span_s"), _by_round(rows, "direct", "wall_s")
    return [span[i] - direct[i] for i in sorted(span) if i in direct]


def _figures(rows: list[dict[str, Any]], first_pushed: int, default_s: float,
             context: str) -> list[Figure]:
    figs = []
    unsampled = list(_by_round(rows, "none", "tg_tps").values())
    cv = (statistics.stdev(unsampled) / statistics.mean(unsampled)
          if len(unsampled) > 1 else None)
    for arm, label, target in (("default", f"default {default_s:g} s", True),
                               ("10hz", "10 Hz", False)):
        values = ratios(rows, arm)
        stats = summarize(values)
        median = stats.get("median")
        low, high = stats.get("median_ci95", [None, None])
        figs.append(Figure(
            f"1 sampler: tg ratio {label} / none, across launches", median, "ratio",
            iqr_text(values), "(info)", None,
            (f"median CI95 {low:.3f}-{high:.3f}; " if low is not None else "") + context
            + (f"; launch-to-launch CV of the unsampled arm {cv:.3f}" if cv and target else "")))
    cost = cpu_shares(rows)
    share = cpu_share_total(rows)
    figs.append(Figure(
        "1 sampler CPU / engine CPU (on the phone)", share, "ratio",
        f"per trial {iqr_text(cost, '{:.4f}')}", "<= 0.01",
        None if share is None else share <= 0.01,
        "sum of the sampler's /proc stat CPU time (its children's included) over the engine's, "
        f"over {len(cost)} default trials (each read in 10 ms ticks)"))
    fidelity = [r["peak_over_hwm"] for r in rows
                if r["arm"] == "default" and r.get("peak_over_hwm") is not None]
    worst = min(fidelity, default=None)
    figs.append(Figure(
        "1 sampler: sampled peak RSS / VmHWM, worst", worst, "ratio",
        iqr_text(fidelity, "{:.3f}"), ">= 0.90", None if worst is None else worst >= 0.9,
        "the largest RSS the sampler saw (m lines and per-tick statm reads) against the "
        "kernel's high-water mark"))
    repeat = [int(r["bytes_pushed"]) for r in rows if "bytes_pushed" in r]
    figs.append(Figure("2 push: bytes pushed, repeat runs", float(max(repeat, default=0)), "B",
                       f"max of {len(repeat)} runs", "0", max(repeat, default=0) == 0,
                       f"first run pushed {first_pushed:,} B"))
    over = overheads(rows)
    stats = summarize(over)
    laps = breakdown([r for r in rows if r["arm"] == "default" and r.get("timings")])
    figs.append(Figure("4 overhead per trial (span - bare engine)", stats.get("median"), "s",
                       iqr_text(over, "{:.2f}"), "<= 1 s",
                       None if not over else stats["median"] <= 1.0,
                       "span = runner's trial..done events; engine run alone on the host; "
                       "one trial per run, so its span also holds the run's one-offs (the "
                       "output check, the bandwidth probe in validity); laps (median s): "
                       + ", ".join(f"{k} {v:.3f}" for k, v in laps.items())))
    inner = [r["span_s"] - r["engine_s"] for r in rows
             if r["arm"] == "default" and r.get("engine_s") and r.get("span_s")]
    figs.append(Figure("4 span - llama-bench samples_ns", summarize(inner).get("median"), "s",
                       iqr_text(inner, "{:.2f}"), "(info)", None,
                       "includes model load and warm-up, which llama-bench does not time"))
    return figs
