"""The demo's steps, in the order that writes a report soonest, and what each one costs.

``harness demo`` compiles up to three llama.cpp builds and runs six matrices. On a fresh 2-core
machine the builds are most of its time, so the plan runs the smoke matrix on the first build
and writes the report and dashboard at once, then compiles and runs the rest, rewriting both
before each build that has to compile (the user reads the report meanwhile) and at the end.

After every step the demo says what comes next and about how long it takes: the duration this
machine recorded the last time it did that step ($HARNESS_CACHE/demo-times.json), else the
figure measured here (``MEASURED_S``). Pure functions over the plan; the I/O is the runner's.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SMOKE = "matrices/smoke.yaml"
BUILDS = "matrices/builds.yaml"
ENGINES = "matrices/engines.yaml"
SUSTAINED = "matrices/sustained.yaml"
BIGGER = "matrices/bigger-than-ram.yaml"
GPU = "matrices/gpu.yaml"

# Seconds each step took on this 2-core machine, for a machine with no record of its own.
# Builds (cold, compiling): from ~/.cache/harness on 2026-12-07, each build's lock file's birth
# to its finished folder: host-release 09:48:58-09:54:08 (310 s), host-slow right after it with
# ccache holding host-release's objects 09:54:08-09:55:16 (68 s; without ccache it compiles as
# much as host-release), host-vulkan 09:55:55-10:02:43 (408 s); ladders: each ladder folder's
# lock to its last file, tiny 1.3 s, bench 25 s, moe 12 s. Matrix runs and reports: a warm
# idle ``./dev demo`` on this machine (runs/demo-final.log, 2026-12-07 18:38: smoke 7 s, builds
# 9 s, engines 6 s, sustained 110 s, bigger-than-ram 102 s, gpu 35 s, the report 4.7 s) plus
# 4-19 s a step outside the run's own time (phones, checks) and a dashboard as long as the
# report (both as measured in this module's first demo, 2026-12-07 19:43, at load 7-24: steps
# 6, 19, 13, 6, 4, 5 s beyond their runs; report 19.0 s, dashboard 19.0 s).
MEASURED_S: dict[str, float] = {
    "build host-release": 310.0,
    "build host-slow": 68.0,
    "build host-vulkan": 408.0,
    "ladder tiny": 2.0,
    "ladder bench": 25.0,
    "ladder moe": 12.0,
    f"run {SMOKE}": 12.0,
    f"run {BUILDS}": 14.0,
    f"run {ENGINES}": 11.0,
    f"run {SUSTAINED}": 115.0,
    f"run {BIGGER}": 107.0,
    f"run {GPU}": 40.0,
    "report": 10.0,
}
CACHED_S = 2.0  # a build or ladder already in the cache: found and copied
DEFAULT_S = 30.0  # a step nothing was measured for (a --matrix of one's own)
TIMES_FILE = "demo-times.json"


@dataclass(frozen=True)
class Step:
    """One thing the demo does. ``kind``: ladder, build, run or report; ``name``: the ladder,
    the build variant, the matrix, or what the report holds."""

    kind: str
    name: str

    @property
    def key(self) -> str:
        return "report" if self.kind == "report" else f"{self.kind} {self.name}"

    def text(self, cached: bool = False) -> str:
        return {"ladder": f"the {self.name} model ladder",
                "build": f"{'finding' if cached else 'compiling'} {self.name}"
                         + BUILD_NOTES.get(self.name, ""),
                "run": f"running {self.name}",
                "report": "rewriting the report and dashboard"}[self.kind]


BUILD_NOTES = {"host-release": " (llama-bench from the vendored llama.cpp)",
               "host-slow": " (the same llama.cpp without AVX2)",
               "host-vulkan": " (llama.cpp with its Vulkan backend)"}


def demo_plan(cached: Iterable[str]) -> list[Step]:
    """The default demo, first report first. ``cached``: the build variants already compiled;
    a report is written before each build that is not (and after the smoke matrix, and last)."""
    have = set(cached)

    def build(variant: str) -> list[Step]:
        before = [] if variant in have else [Step("report", "so far")]
        return [*before, Step("build", variant)]

    steps = [Step("ladder", "tiny"), Step("build", "host-release"), Step("run", SMOKE),
             Step("report", "the smoke matrix"),
             *build("host-slow"), Step("run", BUILDS), Step("run", ENGINES),
             Step("ladder", "bench"), Step("ladder", "moe"), Step("run", SUSTAINED),
             Step("run", BIGGER), *build("host-vulkan"), Step("run", GPU),
             Step("report", "every matrix")]
    # a report right after the smoke one (host-release cached, host-slow not) says nothing new
    return [s for i, s in enumerate(steps)
            if not (s.kind == "report" and i > 0 and steps[i - 1].kind == "report")]


def matrix_plan(ladder: str, matrix: str, builds: Sequence[str]) -> list[Step]:
    """One matrix (``--matrix``, ``--real``): its ladder, its builds, the run, the report."""
    return [Step("ladder", ladder), *[Step("build", b) for b in builds], Step("run", matrix),
            Step("report", matrix)]


def estimate(step: Step, recorded: Mapping[str, float], cached: bool) -> tuple[float, str]:
    """Seconds ``step`` should take and where that figure is from."""
    if cached and step.kind in ("build", "ladder"):
        return CACHED_S, "cached"
    if step.key in recorded:
        return recorded[step.key], "as last time here"
    if step.key == "build host-slow" and not shutil.which("ccache"):
        return MEASURED_S["build host-release"], "as measured on 2 cores, without ccache"
    if step.key in MEASURED_S:
        return MEASURED_S[step.key], "as measured on 2 cores"
    return DEFAULT_S, "a guess"


def about(seconds: float) -> str:
    """``about 40 s``, ``about 5 min``: rounded as an estimate should be."""
    if seconds < 55:
        return f"about {max(5, round(seconds / 5) * 5)} s"
    return f"about {max(1, round(seconds / 60))} min"


def took(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def next_line(steps: Sequence[Step], recorded: Mapping[str, float],
              cached: Callable[[Step], bool]) -> str:
    """``next: compiling host-slow (...), about 1 min (as measured on 2 cores); all that is
    left, about 7 min``, or ``that was the last step``."""
    if not steps:
        return "that was the last step"
    first, source = estimate(steps[0], recorded, cached(steps[0]))
    left = sum(estimate(s, recorded, cached(s))[0] for s in steps)
    line = f"next: {steps[0].text(cached(steps[0]))}, {about(first)} ({source})"
    return line if len(steps) == 1 else f"{line}; all that is left, {about(left)}"


def cache_dir() -> Path:
    """Where the durations are kept: the cache the builds and ladders are in."""
    from harness.artifacts.llama_source import cache_root

    return cache_root()


def first_report(steps: Sequence[Step], recorded: Mapping[str, float],
                 cached: Callable[[Step], bool]) -> str:
    """``, the first report in about 6 min`` (nothing when no step writes one)."""
    reports = [i for i, s in enumerate(steps) if s.kind == "report"]
    if not reports:
        return ""
    seconds = sum(estimate(s, recorded, cached(s))[0] for s in steps[:reports[0] + 1])
    return f", the first report in {about(seconds)}"


def load_times(cache: Path) -> dict[str, float]:
    """The durations recorded on this machine (same CPU count), else nothing."""
    try:
        data = json.loads((cache / TIMES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("cpus") != os.cpu_count():
        return {}
    steps = data.get("seconds", {})
    return {str(k): float(v) for k, v in steps.items() if isinstance(v, int | float)}


def save_times(cache: Path, recorded: Mapping[str, float]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{TIMES_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"cpus": os.cpu_count(), "seconds": dict(recorded)}, indent=1))
    os.replace(tmp, cache / TIMES_FILE)


def run_plan(steps: Sequence[Step], act: Callable[[Step], str], say: Callable[[str], None],
             cached: Callable[[Step], bool], cache: Path,
             clock: Callable[[], float] = time.monotonic) -> None:
    """Do each step (``act`` returns what it made, for the line that follows it), timing it;
    after each, say what comes next and how long it should take. A step's duration is kept
    for the next demo's estimates, a build's or ladder's only when it was not cached."""
    recorded = load_times(cache)
    started = clock()
    say(f"{len(steps)} steps{first_report(steps, recorded, cached)}; "
        f"{next_line(steps, recorded, cached)}")
    for index, step in enumerate(steps):
        was_cached = cached(step)
        begun = clock()
        made = act(step)
        seconds = clock() - begun
        if not (was_cached and step.kind in ("build", "ladder")):
            recorded[step.key] = round(seconds, 1)
            save_times(cache, recorded)
        done = f"{made} ({took(seconds)}; {took(clock() - started)} since the demo started)"
        say(f"{done}; {next_line(steps[index + 1:], recorded, cached)}")
