"""Issue 50 item 2: the harness's time per trial between two engine launches, and where it goes.

One virtual phone runs the sampler figure's cell (``bench/matrices/sampler.yaml``) as one run
of ``N`` repetitions back to back, which is how a matrix's trials follow each other on a phone;
the same llama-bench command also runs directly on the host (no harness) before and after, for
the bare engine's wall time. Per trial (the first one is left out: it pays the run's one-off
costs, the output check and the bandwidth probe, which figure 4 counts):

* overhead = the runner's span (``trial`` .. ``done`` event) - the bare engine's median wall;
* its breakdown: the trial path's own laps (``harness.run.laps``, sent with each ``done``
  event) for pre-flight, cooldown, launch (less the engine's own run on the phone's clock),
  evidence, classify and store;
* the adb shell round trips the trial made, and each one's kind and time, from the device's
  ``shell`` counted from outside (works on any version of the harness, so an older checkout
  can be measured the same way);
* the host's gap between the end of one launch and the start of the next.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import MATRICES, Figure, Lab, Timeline, iqr_text
from harness.run.laps import PHASES

MATRIX = MATRICES / "sampler.yaml"
TARGET_S = 0.4
MAX_ROUND_TRIPS = 2  # the launch and one read after it; a cool phone needs no more
KINDS = ("launch", "evidence", "conditions", "state", "bandwidth", "other")


def shell_kind(command: str) -> str:
    """What a shell command of the trial path is, by its text (pure, tested)."""
    if command.startswith("mkdir -p ") and "/trials/" in command and " exec " in command:
        return "launch"
    if "@@harness:pid" in command:
        return "evidence"
    if "/pre.$$" in command:
        return "conditions"
    if command.startswith("echo @@harness:thermal"):
        return "state"
    if "dd if=/dev/zero" in command:
        return "bandwidth"
    return "other"


Call = tuple[float, float, str, float | None]  # host start, seconds, kind, engine seconds


def phone_engine_seconds(stdout: str) -> float | None:
    """The engine's run on the phone's clock (its t0 .. t1 stamps) from an evidence read's
    output; None without both (pure)."""
    from harness.run.probe import split_sections

    found = split_sections(stdout)
    try:
        return float(found["t1"].split()[0]) - float(found["t0"].split()[0])
    except (KeyError, IndexError, ValueError):
        return None


@dataclass
class Shells:
    """Every shell command one device ran."""

    calls: list[Call] = field(default_factory=list)


@contextlib.contextmanager
def counted(device: Any) -> Iterator[Shells]:
    """Count and time ``device.shell`` (an instance attribute over the method, removed after)."""
    shells = Shells()
    original = device.shell

    def shell(cmd: Any, timeout: float | None = None) -> Any:
        start = time.monotonic()
        kind = shell_kind(cmd if isinstance(cmd, str) else " ".join(cmd))
        engine = None
        try:
            result = original(cmd, timeout=timeout)
            engine = phone_engine_seconds(result.stdout) if kind == "evidence" else None
            return result
        finally:
            shells.calls.append((start, time.monotonic() - start, kind, engine))

    device.shell = shell
    try:
        yield shells
    finally:
        del device.shell


def per_trial(events: Sequence[tuple[float, str, str, dict[str, Any]]],
              calls: Sequence[Call]) -> list[dict[str, Any]]:
    """One row per trial: its span, its laps, and the shells that started inside it (pure)."""
    rows: list[dict[str, Any]] = []
    opened: float | None = None
    for at, kind, _, details in events:
        if kind == "trial":
            opened = at
        elif kind == "done" and opened is not None:
            inside = [c for c in calls if opened <= c[0] < at]
            launches = [c for c in inside if c[2] == "launch"]
            engine = [c[3] for c in inside if c[3] is not None]
            rows.append({
                "span_s": at - opened, "outcome": details.get("outcome"),
                "engine_s": engine[0] if engine else None,
                "timings": details.get("timings") or {},
                "round_trips": len(inside),
                "shells": {k: round(sum(c[1] for c in inside if c[2] == k), 4)
                           for k in KINDS if any(c[2] == k for c in inside)},
                "launch_start": launches[0][0] if launches else None,
                "launch_end": launches[0][0] + launches[0][1] if launches else None})
            opened = None
    return rows


def gaps(rows: Sequence[dict[str, Any]]) -> list[float]:
    """Host seconds from the end of one launch to the start of the next (pure)."""
    ends = [(r["launch_start"], r["launch_end"]) for r in rows if r["launch_start"] is not None]
    return [b[0] - a[1] for a, b in itertools.pairwise(ends)]


def breakdown(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Median seconds per lap over the trials that carry laps; ``launch`` less the engine's own
    time on the phone, which is the engine's and not the harness's (pure)."""
    names: dict[str, list[float]] = {}
    for row in rows:
        laps = dict(row["timings"])
        if "engine" in laps and "launch" in laps:
            laps["launch"] = max(0.0, laps["launch"] - laps.pop("engine"))
        for name, value in laps.items():
            names.setdefault(name, []).append(float(value))
    order = [*PHASES, *sorted(set(names) - set(PHASES))]
    return {name: round(statistics.median(names[name]), 3) for name in order if name in names}


def _matrix(lab: Lab, repetitions: int) -> Path:
    text = MATRIX.read_text()
    lines = [f"repetitions: {repetitions}" if line.startswith("repetitions:") else line
             for line in text.splitlines()]
    path = lab.work / "overhead.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    from bench.sampler import default_interval, direct_command, run_direct

    repetitions = 9 if quick else 25
    device = lab.devices(1)[0]
    results = lab.work / "overhead-results"
    matrix = _matrix(lab, repetitions)
    interval = default_interval()
    lab.run(MATRIX, [device], results, interval)  # warm-up: pushes, caches
    argv = direct_command(lab, MATRIX)
    direct = [run_direct(argv)["wall_s"] for _ in range(3)]
    timeline = Timeline()
    with counted(device) as shells:
        lab.run(matrix, [device], results, interval, timeline)
    direct += [run_direct(argv)["wall_s"] for _ in range(3)]
    rows = per_trial(timeline.events, shells.calls)[1:]  # the first pays the run's one-offs
    return figures(rows, statistics.median(direct)), {
        "repetitions": repetitions, "direct_wall_s": direct, "trials": rows}


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(rows: Sequence[dict[str, Any]], bare_s: float) -> list[Figure]:
    ok = [r for r in rows if r["outcome"] == "ok"]
    over = [r["span_s"] - r["engine_s"] for r in ok if r["engine_s"] is not None]
    median = _median(over)
    host = [r["span_s"] - bare_s for r in ok]
    trips = [float(r["round_trips"]) for r in ok]
    trip = statistics.median(trips) if trips else None
    laps = breakdown(ok)
    shells = {k: round(statistics.median([r["shells"].get(k, 0.0) for r in ok]), 3)
              for k in KINDS if any(k in r["shells"] for r in ok)} if ok else {}
    between = gaps(ok)
    note = ("engine = its t0..t1 stamps on the phone's clock, read back by the trial's own "
            "evidence read; laps (median s): "
            + (", ".join(f"{k} {v:.3f}" for k, v in laps.items()) or "none (older harness)")
            + "; shells (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in shells.items()))
    return [
        Figure("4b overhead per trial, back to back (span - engine on the phone)", median, "s",
               iqr_text(over, "{:.2f}"), f"<= {TARGET_S:g} s",
               None if median is None else median <= TARGET_S, note),
        Figure("4b span - bare engine on the host", _median(host), "s",
               iqr_text(host, "{:.2f}"), "(info)", None,
               f"the same command run directly on the host: median {bare_s:.2f} s of 6 runs, "
               "3 before and 3 after the trials (drifts with the host's load)"),
        Figure("4b adb shell round trips per trial", trip, "", iqr_text(trips, "{:.0f}"),
               f"<= {MAX_ROUND_TRIPS}", None if trip is None else trip <= MAX_ROUND_TRIPS,
               "counted at the device's shell; a phone too hot for the gate adds its polls"),
        Figure("4b host gap between two engine launches", _median(between), "s",
               iqr_text(between, "{:.2f}"), "(info)", None,
               "end of one launch's adb shell to the start of the next one's"),
    ]
