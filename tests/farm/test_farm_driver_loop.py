"""The driver's loop and the worker's job report, with a stand-in Dask client (no cluster)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.cell import Cell
from harness.farm import driver
from harness.farm.driver import _FarmRun, _Job
from harness.farm.job import JobReport, JobRequest, _Emitter
from harness.records import new_trial
from harness.run.events import Kind
from harness.run.order import TrialSpec
from harness.run.session import Prepared, RunOptions

CELL = Cell(build="b", model="m", quant="Q4_0", n_ctx=512, type_k="f16", type_v="f16",
            threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=256,
            n_ubatch=128, n_prompt=32, n_gen=64, repetitions=1)


class _Future:
    """Done once ``finish`` is called (from any thread), as a Dask future's state is."""

    def __init__(self, key: str, log: list[str]) -> None:
        self.key = key
        self.log = log
        self.status = "pending"
        self.report: JobReport | None = None
        self.callbacks: list[Callable[[Any], None]] = []

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def finish(self, report: JobReport) -> None:
        self.report, self.status = report, "finished"
        for callback in self.callbacks:
            callback(self)

    def done(self) -> bool:
        return self.status != "pending"

    def result(self) -> JobReport:
        assert self.report is not None
        return self.report

    def release(self) -> None:
        pass

    def cancel(self) -> None:
        self.status = "cancelled"


class _Client:
    """Runs each submitted job on a thread after ``delay_s``: one trial, ok."""

    def __init__(self, log: list[str], delay_s: float = 0.0) -> None:
        self.log = log
        self.delay_s = delay_s
        self.finished_at: dict[str, float] = {}

    def submit(self, fn: Any, request: JobRequest, key: str, **_: Any) -> _Future:
        self.log.append(f"submit {key}")
        future = _Future(key, self.log)
        spec = request.specs[0]
        report = JobReport(request.job_id, request.serial, "w", 1, 0.0, 0.0,
                           ((new_trial(spec, spec.cell, "ok"), ()),), 0)

        def finish() -> None:
            time.sleep(self.delay_s)
            self.finished_at[key] = time.monotonic()
            future.finish(report)

        threading.Thread(target=finish, daemon=True).start()
        return future

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": {"tls://w": {"name": "w", "resources": {"device:p": 1}}}}

    def subscribe_topic(self, *_: Any) -> None:
        pass

    def unsubscribe_topic(self, *_: Any) -> None:
        pass


def _run(tmp_path: Path, client: _Client, jobs: int) -> _FarmRun:
    prepared = Prepared(SimpleNamespace(adaptive=None), [], {}, {})  # type: ignore[arg-type]
    shipped = driver._Shipped(prepared, (), {})
    run = _FarmRun(SimpleNamespace(KilledWorker=RuntimeError), client, shipped, "", "", "r",
                   RunOptions(tmp_path), set(), ["p"], lambda *_: None, 60.0, 0.5)
    specs = [TrialSpec("r", "p", CELL, rep) for rep in range(jobs)]
    run.queues["p"].extend(_Job("p", [spec], index, f"r/{spec.job_id}/{index}")
                           for index, spec in enumerate(specs))
    return run


def test_the_phones_next_job_is_handed_over_before_the_last_ones_trials_are_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    monkeypatch.setattr(driver.store_io, "append",
                        lambda root, run_id, trial, samples: log.append(f"store {trial.rep}"))
    _run(tmp_path, _Client(log), jobs=3).run()
    assert log == ["submit r/p/" + f"{CELL.config_id}/0", "submit r/p/" + f"{CELL.config_id}/1",
                   "store 0", "submit r/p/" + f"{CELL.config_id}/2", "store 1", "store 2"]


def test_the_driver_wakes_when_a_job_ends_rather_than_on_its_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    seen: list[float] = []
    monkeypatch.setattr(driver.store_io, "append",
                        lambda root, run_id, trial, samples: seen.append(time.monotonic()))
    client = _Client(log, delay_s=0.2)
    _run(tmp_path, client, jobs=1).run()
    ended = next(iter(client.finished_at.values()))
    assert seen[0] - ended < 0.1  # the look at the workers is every 0.5 s


def test_a_jobs_report_carries_its_trials_laps_summed() -> None:
    logged: list[Any] = []
    worker = SimpleNamespace(name="p@h", log_event=lambda topic, message: logged.append(message))
    spec = TrialSpec("r", "p", CELL, 0)
    request = JobRequest("r", "p", spec.job_id, (spec,), 0, None, None,  # type: ignore[arg-type]
                         frozenset(), "topic")
    emit = _Emitter(worker, request)
    emit(Kind.DONE, "p", {"outcome": "ok", "timings": {"engine": 0.5, "evidence": 0.1}})
    emit(Kind.DONE, "p", {"outcome": "ok", "timings": {"engine": 0.25, "preflight": 0.05}})
    emit(Kind.TRIAL, "p", {"trial_id": "t"})
    assert emit.laps == {"engine": 0.75, "evidence": 0.1, "preflight": 0.05}
    # only what the driver takes is sent as it happens: a trial's start, not its end
    assert [m["kind"] for m in logged] == ["trial"]
