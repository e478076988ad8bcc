"""``harness bisect`` at the edges: the cell from the store, builds, runs, the JSON-lines log.

The search itself is ``harness.analysis.bisect`` (pure); git and cmake are
``harness.artifacts.gitbuild``. This module ties them together:

1. resolve the revisions, list the first-parent commits good..bad, find the cell in the store
   (its knobs, model and workload; the matrix of the run that measured it gives the model's
   source, the cool-down and the timeout);
2. replay ``RESULTS/bisect/<id>.jsonl`` (``<id>`` hashes good, bad, cell and ABI, so the same
   command finds the same log and continues where a killed bisect stopped);
3. until the search is done: build the commit it asks for (a failed compile is logged as a skip),
   run a generated two-build matrix (good and the commit, ``reps`` repetitions each, interleaved)
   through ``harness.run.runner.execute`` into the bisect's own store ``RESULTS/bisect/<id>/``,
   judge tg_tps with ``harness.analysis.ab.compare_builds`` and log the verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness import knobs
from harness.analysis.ab import compare_builds
from harness.analysis.bisect import (
    BisectError,
    Measured,
    Outcome,
    Replayed,
    Search,
    Step,
    judge,
    outcome_of,
    replay,
    status,
)
from harness.analysis.frames import load_trials
from harness.artifacts import gitbuild
from harness.cell import Cell
from harness.errors import ConfigError, StoreError
from harness.matrix import expand, load_matrix

LOG_FORMAT = 1
METRIC = "tg_tps"
Say = Callable[[str], None]
DeviceOpener = Callable[[], AbstractContextManager[Sequence[Any]]]


@dataclass(frozen=True)
class BisectRequest:
    source: Path
    good: str
    bad: str
    cell_id: str
    results: Path
    devices: str = "sim:1"
    abi: str = "host"
    reps: int = 5
    noise: float = 0.03
    jobs: int | None = None
    keep_work: bool = False


@dataclass(frozen=True)
class BisectReport:
    bisect_id: str
    log: Path
    good: str
    bad: str
    cell_id: str
    label: str
    first_bad: str
    first_bad_subject: str
    last_good: str
    candidates: tuple[str, ...]
    evidence: tuple[dict[str, Any], ...]
    builds: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        compiled = [b for b in self.builds if b["ok"] and not b.get("cached")]
        return {
            "schema_version": 1, "bisect_id": self.bisect_id, "log": str(self.log),
            "good": self.good, "bad": self.bad, "cell_id": self.cell_id, "label": self.label,
            "first_bad": self.first_bad, "first_bad_subject": self.first_bad_subject,
            "last_good": self.last_good, "exact": len(self.candidates) == 1,
            "candidates": list(self.candidates), "skipped": list(self.skipped),
            "builds": len([b for b in self.builds if not b.get("cached")]),
            "build_seconds": [round(b["seconds"], 1) for b in compiled],
            "evidence": list(self.evidence),
        }


def bisect_id(good: str, bad: str, cell_id: str, abi: str) -> str:
    text = json.dumps([good, bad, cell_id, abi])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def log_path(results: Path, ident: str) -> Path:
    return results / "bisect" / f"{ident}.jsonl"


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a log; a torn last line (a kill mid-write) is dropped."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    records = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if index == len(lines) - 1:
                break
            raise ConfigError(
                f"{path}: line {index + 1} is not JSON; fix or delete the log") from None
    return records


def append_log(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({**record, "at": datetime.now(UTC).isoformat(timespec="seconds")})
    with open(path, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


# -- the cell ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A store value as plain Python; null (None, NaN, pd.NA) as None."""
    try:
        if value is None or bool(pd.isna(value)):
            return None
    except (TypeError, ValueError):  # not a scalar
        return value
    return value.item() if hasattr(value, "item") else value


def cell_from_trials(trials: pd.DataFrame, cell_id: str, results: Path) -> tuple[Cell, str]:
    """The stored cell ``cell_id`` (rebuilt from its trials' columns) and a run that measured it."""
    rows = trials[trials["cell_id"] == cell_id] if "cell_id" in trials else trials.iloc[:0]
    if rows.empty:
        raise ConfigError(f"--cell {cell_id}: no such cell in {results} "
                          "(see `harness history` or the store's cell_id column)")
    row = {k: _plain(v) for k, v in rows.iloc[-1].to_dict().items()}
    values = {k.name: _plain(knobs.stored(row, k.name)) for k in knobs.KNOBS}
    base = Cell(
        build=str(row["build_id"]), model=str(row["model_name"]), quant=str(row["quant"]),
        n_prompt=int(row["n_prompt"]), n_gen=int(row["n_gen"]), n_depth=int(row["n_depth"] or 0),
        engine=str(row.get("engine") or "llama-bench"),
        sustained_s=float(row.get("sustained_s") or 0.0),
        **{k.name: values[k.name] for k in knobs.KNOBS if k.attribute},
        extra=tuple((k.name, values[k.name]) for k in knobs.KNOBS if not k.attribute),
    )
    for affinity in (base.affinity, "big", "all"):  # a trial stores a resolved mask for "big"
        cell = replace(base, affinity=affinity)
        if cell.cell_id == cell_id:
            return cell, str(row["run_id"])
    raise ConfigError(f"--cell {cell_id}: its trials do not rebuild the cell (stored by another "
                      "harness version?)")


def _origin_matrix(results: Path, run_id: str) -> dict[str, Any]:
    from harness.run.runner import load_run_meta

    meta = load_run_meta(results, run_id)
    path = Path(meta["matrix"])
    if not path.is_file():
        raise ConfigError(f"run {run_id}: its matrix {path} is gone; the bisect needs it for the "
                          "model's source")
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def matrix_document(cell: Cell, origin: dict[str, Any], builds: Sequence[str],
                    reps: int) -> dict[str, Any]:
    """A matrix of exactly ``cell`` for each of ``builds``."""
    models = origin.get("models") or {}
    if cell.model not in models:
        raise ConfigError(f"the matrix of the cell's run declares no model {cell.model!r}")
    axes: dict[str, Any] = {
        "engine": [cell.engine], "build": list(builds), "model": [cell.model],
        "quant": [cell.quant],
        # every knob of the registry, so the bisected cell is the stored one (its device too)
        **{axis: [value] for axis, value in knobs.axes_of(cell.knob_values()).items()},
    }
    workload: dict[str, Any] = {"n_prompt": cell.n_prompt, "n_gen": cell.n_gen,
                                "n_depth": cell.n_depth}
    if cell.sustained_s:
        workload["sustained"] = {"duration_s": cell.sustained_s}
    doc: dict[str, Any] = {
        "name": "bisect", "description": f"harness bisect: {cell.label()}",
        "axes": axes, "models": {cell.model: models[cell.model]}, "workload": workload,
        "repetitions": reps,
    }
    for key in ("cooldown", "timeout", "require"):
        if key in origin:
            doc[key] = origin[key]
    return doc


# -- the loop ------------------------------------------------------------------------------


class Bisector:
    """One bisect: the state on disk, and the steps that move it on."""

    def __init__(self, request: BisectRequest, say: Say | None = None) -> None:
        if request.abi != "host":
            raise ConfigError(f"--abi {request.abi}: bisect builds for the host ABI only for now")
        self.request = request
        self.say = say or (lambda text: None)
        source = request.source
        gitbuild.check_checkout(source)
        self.good = gitbuild.resolve(source, request.good, "--good")
        self.bad = gitbuild.resolve(source, request.bad, "--bad")
        gitbuild.check_llama_cpp(source, self.bad)
        self.commits = gitbuild.first_parent_commits(source, self.good, self.bad)
        self.subjects = {c.sha: c.subject for c in self.commits}
        self.subjects[self.good] = gitbuild.subject(source, self.good)
        try:
            trials = load_trials(request.results)
        except StoreError as error:
            raise ConfigError(f"--cell {request.cell_id}: {error}") from None
        self.cell, origin_run = cell_from_trials(trials, request.cell_id, request.results)
        self.origin = _origin_matrix(request.results, origin_run)
        matrix_document(self.cell, self.origin, ["x"], 1)  # the model must be declared
        self.search = Search(self.good, tuple(c.sha for c in self.commits))
        self.id = bisect_id(self.good, self.bad, request.cell_id, request.abi)
        self.log = log_path(request.results, self.id)
        self.store = request.results / "bisect" / self.id
        self.workspace = gitbuild.Workspace(source, self.id, jobs=request.jobs)

    def state(self) -> Replayed:
        return replay(read_log(self.log))

    def _start(self, state: Replayed) -> None:
        if state.start is not None:
            return
        append_log(self.log, {
            "event": "start", "format": LOG_FORMAT, "bisect_id": self.id,
            "source": str(self.request.source.resolve()), "good": self.good, "bad": self.bad,
            "cell_id": self.request.cell_id, "label": self.cell.label(), "abi": self.request.abi,
            "devices": self.request.devices, "reps": self.request.reps,
            "commits": [{"sha": c.sha, "subject": c.subject} for c in self.commits],
        })
        self.say(f"bisect {self.id}: {len(self.commits)} commits, about "
                 f"{self.search.max_tests()} tests; log {self.log}")

    def run(self, open_devices: DeviceOpener) -> BisectReport:
        state = self.state()
        self._start(state)
        if state.done is None:
            step = self.search.next_step(state.results)
            if step.kind == "test":
                with open_devices() as devices:
                    if not devices:
                        raise ConfigError(f"--devices {self.request.devices!r} names no device")
                    step = self._steps(list(devices), step)
            self._finish(step)
            if not self.request.keep_work:
                self.workspace.remove()
        return self.report()

    def _steps(self, devices: list[Any], step: Step) -> Step:
        while step.kind == "test":
            assert step.commit is not None
            self._test(devices, step.commit, step.retry)
            step = self.search.next_step(self.state().results)
        return step

    def _build(self, commit: str) -> bool:
        logged = self.state().built(commit)
        if logged is False:
            return False
        if logged and self.workspace.cached(commit) is not None:
            return True
        self.say(f"building {commit[:12]} {self.subjects.get(commit, '')}")
        made = self.workspace.build(commit)
        append_log(self.log, {"event": "build", "commit": commit, "ok": made.build is not None,
                              "cached": made.cached, "seconds": round(made.seconds, 2),
                              "error": made.error})
        if made.build is None:
            self.say(f"  {commit[:12]} does not compile: skipped ({made.error})")
        return made.build is not None

    def _test(self, devices: list[Any], commit: str, retry: bool) -> None:
        if not self._build(self.good):
            raise BisectError(f"--good {self.good[:12]} does not compile; pick another one")
        if not self._build(commit):
            return
        previous = self.state().run_ids(commit) if retry else []
        run_id = self._measure(devices, commit)
        run_ids = [*previous, run_id]
        evidence = self._judge(commit, run_ids)
        append_log(self.log, {"event": "measure", "commit": commit, "retry": retry,
                              "run_ids": run_ids, **evidence})
        self.say(f"  {commit[:12]}: {evidence['verdict']} ({evidence['outcome']}), ratio "
                 f"{evidence['ratio']}, n {evidence['n_good']}/{evidence['n_candidate']}")

    def _measure(self, devices: list[Any], commit: str) -> str:
        from harness.run.runner import RunOptions, execute

        folder = self.store / "matrices"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{commit[:12]}-{len(list(folder.iterdir()))}.yaml"
        doc = matrix_document(self.cell, self.origin, [self.good, commit], self.request.reps)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        cells = expand(load_matrix(path))
        if {c.config_id for c in cells} != {self.cell.config_id}:
            raise BisectError(f"the generated matrix {path} does not reproduce the cell's "
                              "configuration")
        options = RunOptions(results=self.store, builds=gitbuild.builds_dir())
        self.say(f"  measuring {commit[:12]} against {self.good[:12]} "
                 f"({self.request.reps} repetitions each)")
        summary = execute(path, devices, options)
        return summary.run_id

    def _judge(self, commit: str, run_ids: Sequence[str]) -> dict[str, Any]:
        trials = load_trials(self.store)
        trials = trials[trials["run_id"].isin(list(run_ids))]
        try:
            result = compare_builds(trials, self.good, commit, (METRIC,),
                                    noise=self.request.noise)
            cells = [c for c in result.cells
                     if c.key.config_id == self.cell.config_id and c.metric == METRIC]
        except ConfigError:  # a side without usable trials (its llama-bench failed)
            cells = []
        if not cells:
            counts = trials.groupby("outcome").size().to_dict()
            return {"verdict": "unstable", "outcome": outcome_of("unstable"), "ratio": None,
                    "ci_low": None, "ci_high": None, "n_good": 0, "n_candidate": 0,
                    "median_good": None, "median_candidate": None,
                    "reason": f"no usable trials on both sides (outcomes {counts})"}
        cell = cells[0]
        c = cell.comparison
        outcome = judge(Measured(c.verdict, _num(c.ratio), _num(c.ci_low), _num(c.ci_high),
                                 _num(c.p_adjusted), tuple(c.causes)), self.request.noise)
        reason = c.reason
        edge = 1 - self.request.noise
        if outcome == "good" and outcome_of(c.verdict) != "good":
            reason += f"; counted good: the whole interval is above {edge:.2f}"
        elif outcome == "bad" and outcome_of(c.verdict) != "bad":
            reason += (f"; counted bad: significant, the whole interval below 1 and the estimate "
                       f"below {edge:.2f} (the CV veto is not applied in a bisect)")
        return {
            "verdict": c.verdict, "outcome": outcome, "ratio": _num(c.ratio),
            "ci_low": _num(c.ci_low), "ci_high": _num(c.ci_high), "p_adjusted":
            _num(c.p_adjusted), "n_good": c.n_baseline, "n_candidate": c.n_candidate,
            "median_good": _num(cell.median_baseline),
            "median_candidate": _num(cell.median_candidate), "reason": reason,
            "device": cell.key.device,
        }

    def _finish(self, step: Step) -> None:
        assert step.first_bad is not None
        append_log(self.log, {"event": "done", "first_bad": step.first_bad,
                              "last_good": step.last_good, "candidates": list(step.candidates)})

    def report(self) -> BisectReport:
        state = self.state()
        done = state.done
        assert done is not None
        evidence = []
        for record in state.measures:
            evidence.append({
                "commit": record["commit"], "subject": self.subjects.get(record["commit"], ""),
                **{k: record.get(k) for k in ("verdict", "outcome", "ratio", "ci_low", "ci_high",
                                              "n_good", "n_candidate", "median_good",
                                              "median_candidate", "retry", "reason")},
            })
        skipped = tuple(b["commit"] for b in state.builds if not b["ok"])
        first_bad = str(done["first_bad"])
        return BisectReport(
            bisect_id=self.id, log=self.log, good=self.good, bad=self.bad,
            cell_id=self.request.cell_id, label=self.cell.label(), first_bad=first_bad,
            first_bad_subject=self.subjects.get(first_bad, ""),
            last_good=str(done["last_good"]), candidates=tuple(done["candidates"]),
            evidence=tuple(evidence), builds=tuple(state.builds),
            skipped=skipped + tuple(c for c, outcomes in _outcomes(state.measures).items()
                                    if status(outcomes) == "skip" and c not in skipped),
        )


def _outcomes(measures: Sequence[Mapping[str, Any]]) -> dict[str, list[Outcome]]:
    """Each measured commit's outcomes, in the order they were measured."""
    found: dict[str, list[Outcome]] = {}
    for record in measures:
        found.setdefault(str(record["commit"]), []).append(record["outcome"])
    return found


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None

