"""The nightly recipe as one function: run, compare, look at history, report, decide.

Why a function with injected steps: the recipe is the same on a laptop with virtual phones and on
a farm, only the runner differs, and its tests must not need phones. ``run`` is
``harness.run.runner.execute``-shaped (matrix, results -> a summary with ``run_id``), ``report``
writes the dated HTML report when that command exists.

Two comparisons per nightly build: against the baseline (cumulative drift since the release;
tonight's baseline trials when the matrix ran it tonight, else every stored baseline trial) and
against the previous night (what changed since yesterday: the same configs, the previous run's
trials). Gates apply to both; history runs over every night except the baseline build's. A side
is a build and its engine: each build of tonight is compared, engine by engine, with the
baseline's trials of the same engine (an engine the baseline never ran is noted, not compared).

The night's alert document (``alerts.build_alerts``: regressions, improvements, new change points,
new failures, missing phones and cells, cells whose noise grew) is built here from the same
frames, and written, with the ``--on-alert`` command run, by ``write_alerts`` and
``run_on_alert``: the recipe's only I/O besides the injected steps and the store.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from harness.analysis.ab import BuildComparison, compare_builds, load_sequential
from harness.analysis.alerts import AlertDocument, build_alerts
from harness.analysis.frames import (
    Side,
    engine_column,
    load_trials,
    nights,
    side_rows,
    sides,
)
from harness.analysis.gates import Gate
from harness.analysis.trend import Change, Series, nightly_history
from harness.cell import DEFAULT_ENGINE
from harness.errors import ConfigError
from harness.metrics import DEFAULT_METRICS


class RunResult(Protocol):
    run_id: str


Runner = Callable[[Path, Path], RunResult]  # (matrix, results) -> summary with run_id
Reporter = Callable[[Path, str, Path], Path | None]  # (results, run_id, out) -> written file


@dataclass(frozen=True)
class NightlyComparison:
    title: str  # "vs baseline" / "vs previous night"
    result: BuildComparison


@dataclass(frozen=True)
class NightlyResult:
    run_id: str
    night: str
    comparisons: tuple[NightlyComparison, ...]
    history: tuple[Series, ...]
    report: Path | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    alerts: AlertDocument | None = None

    @property
    def passed(self) -> bool:
        return all(c.result.passed for c in self.comparisons)

    def changes(self) -> list[tuple[Series, Change]]:
        return [(s, c) for s in self.history for c in s.changes]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "night": self.night, "passed": self.passed,
            "comparisons": [{"title": c.title, **c.result.to_json()} for c in self.comparisons],
            "change_points": [s.to_json() for s in self.history if s.changes],
            "report": str(self.report) if self.report else None, "notes": list(self.notes),
        }


def _relabel(rows: pd.DataFrame, label: str) -> pd.DataFrame:
    return rows.assign(build_id=label)


def _main_build(rows: pd.DataFrame, baseline: str) -> str | None:
    others = rows[rows["build_id"] != baseline]["build_id"]
    return None if others.empty else str(others.value_counts().index[0])


def _engine_note(engine: str) -> str:
    return "" if engine == DEFAULT_ENGINE else f" [{engine}]"


def _against_baseline(tonight: pd.DataFrame, base_rows: pd.DataFrame, baseline: str,
                      metrics: Sequence[str], gates: Sequence[Gate],
                      notes: list[str], sequential: pd.DataFrame | None = None,
                      ) -> list[NightlyComparison]:
    """Every side of tonight but the baseline's, against the baseline run by the same engine."""
    base_engines = set(engine_column(base_rows))
    out = []
    for side in sides(tonight):
        if side.build == baseline:
            continue
        if side.engine not in base_engines:
            notes.append(f"{side}: baseline {baseline} has no trials of engine {side.engine}: "
                         "not compared")
            continue
        base = side_rows(base_rows, Side(baseline, side.engine))
        frame = pd.concat([base, side_rows(tonight, side)])
        out.append(NightlyComparison(
            f"{side.build} vs baseline {baseline}{_engine_note(side.engine)}",
            compare_builds(frame, baseline, side.build, metrics, gates,
                           baseline_engine=side.engine, candidate_engine=side.engine,
                           sequential=sequential)))
    return out


def _against_previous(tonight: pd.DataFrame, previous: pd.DataFrame, current: str, night: str,
                      baseline: str, metrics: Sequence[str],
                      gates: Sequence[Gate]) -> list[NightlyComparison]:
    """Tonight's main build against the previous run's, engine by engine."""
    last_run = previous.sort_values("started_at").iloc[-1]["run_id"]
    last = previous[previous["run_id"] == last_run]
    old = _main_build(last, baseline) or str(last["build_id"].iloc[0])
    old_night = str(nights(last).max())
    a, b = f"{old}@{old_night}", f"{current}@{night}"
    out = []
    for engine in sorted(set(engine_column(tonight[tonight["build_id"] == current]))):
        before = side_rows(last, Side(old, engine))
        if before.empty:
            continue
        frame = pd.concat([_relabel(before, a),
                           _relabel(side_rows(tonight, Side(current, engine)), b)])
        out.append(NightlyComparison(
            f"{current} vs previous night ({old}, {old_night}){_engine_note(engine)}",
            compare_builds(frame, a, b, metrics, gates, baseline_engine=engine,
                           candidate_engine=engine)))
    return out


def run_nightly(
    matrix: Path,
    *,
    baseline: str,
    results: Path,
    run: Runner,
    gates: Sequence[Gate] = (),
    metrics: Sequence[str] = DEFAULT_METRICS,
    report: Reporter | None = None,
    reports_dir: Path = Path("reports"),
) -> NightlyResult:
    """Run ``matrix`` once and analyse that night; see the module docstring."""
    summary = run(matrix, results)
    trials = load_trials(results)
    tonight = trials[trials["run_id"] == summary.run_id]
    if tonight.empty:
        raise ConfigError(f"run {summary.run_id} stored no trials in {results}")
    night = str(nights(tonight).max())
    notes: list[str] = []
    base_rows = tonight[tonight["build_id"] == baseline]
    if base_rows.empty:
        base_rows = trials[trials["build_id"] == baseline]
        if base_rows.empty:
            raise ConfigError(f"--baseline {baseline!r}: no trials of that build, tonight or "
                              "before; add it to the matrix's build axis")
        notes.append(f"baseline {baseline} did not run tonight: compared with its stored trials")
    comparisons = _against_baseline(tonight, base_rows, baseline, metrics, gates, notes,
                                    load_sequential(results))
    previous = trials[(trials["run_id"] != summary.run_id) & (trials["build_id"] != baseline)]
    current = _main_build(tonight, baseline)
    if current is not None and not previous.empty:
        comparisons.extend(_against_previous(tonight, previous, current, night, baseline,
                                             metrics, gates))
    elif current is not None:
        notes.append("no previous night in the store: nothing to compare tonight against")
    history = _history(trials, metrics, baseline)
    alerts = build_alerts(
        run_id=summary.run_id, night=night, trials=trials,
        comparisons=[(c.title, c.result) for c in comparisons], history=history,
        previous_history=_history(trials[trials["run_id"] != summary.run_id], metrics, baseline),
        metrics=metrics)
    written = None
    if report is not None:
        written = report(results, summary.run_id, reports_dir / f"nightly-{night}.html")
    else:
        notes.append("no `harness report` command installed: dated report skipped")
    return NightlyResult(summary.run_id, night, tuple(comparisons), tuple(history), written,
                         tuple(notes), alerts)


def _history(trials: pd.DataFrame, metrics: Sequence[str], baseline: str) -> list[Series]:
    if trials.empty:
        return []
    return [s for metric in metrics
            for s in nightly_history(trials, metric, exclude_builds=[baseline])]


def alerts_path(reports_dir: Path, night: str) -> Path:
    """The default home of the alert document: beside the dated report."""
    return reports_dir / f"nightly-{night}-alerts.json"


def write_alerts(document: AlertDocument, path: Path) -> tuple[Path, Path]:
    """Write the document as JSON at ``path`` and as Markdown beside it (``.md``)."""
    if path.suffix != ".json":
        raise ConfigError(f"--alerts {path}: name a .json file (the Markdown is written beside "
                          "it, with .md)")
    path.parent.mkdir(parents=True, exist_ok=True)
    markdown = path.with_suffix(".md")
    path.write_text(json.dumps(document.to_json(), indent=2) + "\n", encoding="utf-8")
    markdown.write_text(document.to_markdown(), encoding="utf-8")
    return path, markdown


def on_alert_command(command: str, path: Path) -> str:
    """``command`` with the document's path (shell-quoted) for each ``{}``, else appended."""
    quoted = shlex.quote(str(path))
    return command.replace("{}", quoted) if "{}" in command else f"{command} {quoted}"


def run_on_alert(command: str, path: Path, timeout: float) -> str | None:
    """Run the ``--on-alert`` shell command once; None when it succeeded, else one line saying
    why not (its exit status or the timeout, and the last line of its stderr). Its stdout is
    discarded; on a timeout its whole process group is killed."""
    line = on_alert_command(command, path)
    with subprocess.Popen(line, shell=True, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return f"--on-alert: {line!r} timed out after {timeout:g}s"
    if proc.returncode == 0:
        return None
    tail = err.strip().splitlines()[-1:] if err else []
    return f"--on-alert: {line!r} exited {proc.returncode}" + (f": {tail[0]}" if tail else "")
