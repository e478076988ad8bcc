"""What every figure module shares: the Figure row, paired statistics, and the lab.

The lab is the real path a nightly run takes, made private: its own adb server (port, HOME),
virtual phones under a temporary home, a builds root holding a copy of the cached host build.
Every figure drives trials through ``harness.run.runner.execute`` on those phones, so what is
measured is what a user's ``harness run`` pays.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MATRICES = ROOT / "bench" / "matrices"


@dataclass(frozen=True)
class Figure:
    """One line of the summary table; ``met`` is None for information-only rows."""

    figure: str
    value: float | None
    unit: str
    spread: str
    target: str
    met: bool | None
    note: str = ""

    def value_text(self) -> str:
        if self.value is None:
            return "n/a"
        if self.unit == "ratio":
            return f"{self.value:.3f}"
        if self.unit == "%":
            return f"{self.value:.1f}%"
        if self.unit == "B":
            return f"{self.value:,.0f} B"
        if self.unit == "GiB":
            return f"{self.value:.2f} GiB"
        return f"{self.value:.2f} {self.unit}".strip()


def pctl(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def iqr_text(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """'p25-p75 (n=…)': the spread of paired ratios, robust to one disturbed pair."""
    if not values:
        return "-"
    return f"{fmt.format(pctl(values, 25))}-{fmt.format(pctl(values, 75))} (n={len(values)})"


def median_ci(values: Sequence[float], seed: int = 1, draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the median (percentile method); wide means noisy."""
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(data, size=(draws, len(data)), replace=True), axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def mean_ci(values: Sequence[float], seed: int = 1, draws: int = 4000) -> tuple[float, float]:
    """95% bootstrap interval of the mean (percentile method)."""
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = rng.choice(data, size=(draws, len(data)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, quartiles, min/max and a bootstrap CI of the median, for the JSON files."""
    if not values:
        return {"n": 0}
    low, high = median_ci(values)
    return {"n": len(values), "median": statistics.median(values), "p25": pctl(values, 25),
            "p75": pctl(values, 75), "min": min(values), "max": max(values),
            "median_ci95": [low, high], "values": list(values)}


def machine() -> dict[str, Any]:
    """The context a figure needs to be read: cores, load average now, Python."""
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "at": datetime.now(UTC).isoformat()}


def write_result(name: str, mode: str, figures: Sequence[Figure], data: dict[str, Any],
                 out_dir: Path = RESULTS, load_before: Sequence[float] | None = None) -> Path:
    """bench/results/<name>.json: figures, raw data, the machine and its load around the run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": name, "mode": mode, "figures": [asdict(f) for f in figures],
              "load_average_before": list(load_before) if load_before else None,
              "machine": machine(), "data": data}
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


@dataclass
class Timeline:
    """Host-clock times of the runner's events, so per-trial spans can be taken from outside."""

    events: list[tuple[float, str, str, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        self.events.append((time.monotonic(), kind, serial, dict(details)))

    def trial_spans(self) -> list[dict[str, Any]]:
        """One entry per trial: seconds from the runner's 'trial' event to its 'done' event."""
        open_: dict[str, float] = {}
        spans = []
        for at, kind, serial, details in self.events:
            if kind == "trial":
                open_[serial] = at
            elif kind == "done" and serial in open_:
                spans.append({"serial": serial, "span_s": at - open_.pop(serial), **details})
        return spans


@dataclass
class Lab:
    """A private adb server, virtual phones and a builds root; see :func:`open_lab`."""

    work: Path
    builds: Path
    sim_home: Path
    adb: Any  # harness.testing.adbserver.AdbServer
    phones: list[Any] = field(default_factory=list)  # PhoneInfo, in start order

    def ensure_phones(self, count: int) -> None:
        from harness.virtual.control import start_phones

        if len(self.phones) < count:
            self.phones += start_phones("midrange-8gb", count - len(self.phones),
                                        home=self.sim_home, abi="x86_64")

    def devices(self, count: int) -> list[Any]:
        from harness.device.adb import AdbDevice

        self.ensure_phones(count)
        return [AdbDevice(p.serial) for p in self.phones[:count]]

    def run(self, matrix: Path, devices: Sequence[Any], results: Path,
            sample_interval_s: float = 0.5,
            timeline: Callable[[str, str, dict[str, Any]], None] | None = None,
            reserve_bytes: int | None = None) -> Any:
        """``harness run`` through the library: the path the CLI takes (``reserve_bytes``:
        its --reserve, default 512 MiB)."""
        from harness.run.runner import RunOptions, execute

        options = RunOptions(results=results, builds=self.builds,
                             sample_interval_s=sample_interval_s)
        if reserve_bytes is not None:
            options = dataclasses.replace(options, reserve_bytes=reserve_bytes)
        return execute(matrix, list(devices), options, on_event=timeline)


@contextlib.contextmanager
def open_lab(work: Path) -> Iterator[Lab]:
    """Start a private adb server and point this process at it; stop phones and server after.

    Phones are stopped by the pids recorded in their slots, the server by its own pid, also
    when a figure fails half-way.
    """
    from harness.artifacts.cmake_build import ensure_host_build
    from harness.artifacts.ladder import default_cache_root
    from harness.testing.adbserver import private_adb_server
    from harness.virtual.control import stop_phones

    builds = work / "builds"
    ensure_host_build("host-release", builds)
    saved = dict(os.environ)
    # the adb server gets its own HOME; the models cache stays the user's
    os.environ["HARNESS_CACHE"] = str(default_cache_root())
    with private_adb_server(work / "adb-home") as server:
        os.environ.update(server.env)
        os.environ["HARNESS_HOME"] = str(work / "harness-home")
        lab = Lab(work=work, builds=builds, sim_home=work / "sim", adb=server)
        try:
            yield lab
        finally:
            with contextlib.suppress(Exception):
                stop_phones(home=lab.sim_home)
            os.environ.clear()
            os.environ.update(saved)


@contextlib.contextmanager
def parse_models_once() -> Iterator[None]:
    """Parse each matrix's models once per suite instead of once per ``execute``.

    ``execute`` reads every model's GGUF metadata on each call (about 3 s for the bench model's
    16k-token vocabulary on this host). The interleaved figures call it once per trial with
    the same, unchanged matrix, so that setup would be most of the time spent; the trial
    itself, which is what is measured, is untouched.
    """
    from harness.run import runner

    original = getattr(runner, "prepare", None)
    if original is None:
        yield
        return
    cache: dict[tuple[str, str], Any] = {}

    def cached(matrix_path: Path, options: Any) -> Any:
        key = (str(Path(matrix_path).resolve()), str(getattr(options, "builds", "")))
        if key not in cache:
            cache[key] = original(matrix_path, options)
        return cache[key]

    runner.prepare = cached
    try:
        yield
    finally:
        runner.prepare = original
