"""`harness demo`'s order: the smoke matrix's report and dashboard are written as soon as the
tiny ladder and one llama-bench build exist, before the slower builds compile; after every step
the demo says what comes next and about how long, from this machine's recorded durations or the
figures measured on 2 cores. The steps are stubbed: each records itself instead of compiling or
running phones."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import harness.cli.demo as cli_demo
import harness.cli.run as cli_run
from harness.cli import main

MATRICES = [f"matrices/{m}.yaml" for m in ("smoke", "builds", "engines", "sustained",
                                           "bigger-than-ram", "gpu")]


class Recorder:
    """The demo's steps as stubs, in the order they are called (on this code and the old)."""

    def __init__(self, compiled: set[str]) -> None:
        self.events: list[str] = []
        self.compiled = compiled  # build variants that are cached from the start

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        events = self.events

        def ladder(paths: Any, say: Any, ladder: str = "tiny") -> str:
            events.append(f"ladder {ladder}")
            return f"models: {ladder}"

        def old_artifacts(paths: Any, say: Any, ladder: str = "tiny") -> None:
            ladder_made = ladder
            events.extend([f"ladder {ladder_made}", "build host-release"])

        def build(paths: Any, say: Any, variant: str) -> str:
            events.append(f"build {variant}")
            self.compiled.add(variant)
            return f"engine: {variant}"

        @contextmanager
        def environment(paths: Any) -> Iterator[None]:
            yield

        @click.command()
        @click.pass_context
        def run_command(ctx: click.Context, **options: Any) -> None:
            events.append(f"run {options['matrix']}")

        @click.command()
        def report(**options: Any) -> None:
            events.append("report")

        def site(paths: Any) -> Path:
            events.append("dashboard")
            return paths.site / "index.html"

        for name, stub in [("prepare_ladder", ladder), ("prepare_artifacts", old_artifacts),
                           ("prepare_build", build), ("demo_environment", environment),
                           ("build_demo_site", site),
                           ("build_cached", lambda variant: variant in self.compiled),
                           ("ladder_cached", lambda ladder: False),
                           ("prepare_slow_build", lambda p, s: build(p, s, "host-slow")),
                           ("prepare_vulkan_build", lambda p, s: build(p, s, "host-vulkan"))]:
            monkeypatch.setattr(cli_demo, name, stub, raising=False)
        monkeypatch.setattr(cli_run, "run_command", run_command)
        monkeypatch.setitem(main.commands, "report", report)


def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: set[str]) -> tuple[
        Recorder, str]:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    recorder = Recorder(compiled)
    recorder.install(monkeypatch)
    done = CliRunner().invoke(main, ["demo", "--root", str(tmp_path / "demo")])
    assert done.exit_code == 0, done.output
    return recorder, done.output


def test_the_first_report_is_written_before_the_slow_builds_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder, _ = demo(tmp_path, monkeypatch, set())
    events = recorder.events
    first = events.index("report")
    assert events[:first] == ["ladder tiny", "build host-release", f"run {MATRICES[0]}"]
    assert events[first + 1] == "dashboard"
    assert first < events.index("build host-slow") < events.index("build host-vulkan")
    # rewritten before each build that compiles and at the end, with every matrix in
    reports = [i for i, e in enumerate(events) if e == "report"]
    assert [events[i + 2] for i in reports[:-1]] == ["build host-slow", "build host-vulkan"]
    assert events[reports[-1] - 1] == f"run {MATRICES[-1]}"
    assert [e for e in events if e.startswith("run ")] == [f"run {m}" for m in MATRICES]


def test_with_every_build_cached_the_report_is_written_after_smoke_and_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder, _ = demo(tmp_path, monkeypatch, {"host-release", "host-slow", "host-vulkan"})
    assert recorder.events.count("report") == 2
    assert recorder.events.index("report") == 3


def test_each_step_says_what_comes_next_and_how_long_from_what_this_machine_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import demoplan

    cache = tmp_path / "cache"
    demoplan.save_times(cache, {"build host-slow": 125.0, "build host-vulkan": 610.0})
    _, output = demo(tmp_path, monkeypatch, set())
    lines = output.splitlines()
    report = next(i for i, line in enumerate(lines) if line.startswith("demo: report and dash"))
    assert "(the smoke matrix" in lines[report]
    assert lines[report].endswith("next: compiling host-slow (the same llama.cpp without AVX2), "
                                  "about 2 min (as last time here); all that is left, about "
                                  f"{round((125 + 610 + sum(_measured_rest())) / 60)} min")
    before_vulkan = [line for line in lines if "next: compiling host-vulkan" in line]
    assert before_vulkan and "about 10 min (as last time here)" in before_vulkan[0]
    assert lines[-1].startswith("demo: report and dashboard written (every matrix")
    assert lines[-1].endswith("that was the last step")
    # this run's durations are kept for the next one: every step that ran, the builds included
    kept = json.loads((cache / demoplan.TIMES_FILE).read_text())
    assert kept["cpus"] == os.cpu_count()
    assert set(kept["seconds"]) == {s.key for s in demoplan.demo_plan(set())}


def _measured_rest() -> list[float]:
    """The measured figures of the steps after the first report but the two recorded builds
    and the reports (recorded by then: the stubbed first one took no time)."""
    from harness import demoplan
    from harness.demoplan import Step

    steps = demoplan.demo_plan(set())
    rest = steps[steps.index(Step("report", "the smoke matrix")) + 1:]
    return [demoplan.MEASURED_S[s.key] for s in rest if s.kind not in ("build", "report")]


def test_estimates_prefer_this_machines_record_then_the_measured_figure() -> None:
    from harness import demoplan
    from harness.demoplan import Step

    step = Step("build", "host-vulkan")
    assert demoplan.estimate(step, {}, cached=True) == (demoplan.CACHED_S, "cached")
    assert demoplan.estimate(step, {step.key: 500.0}, cached=False) == (500.0,
                                                                        "as last time here")
    assert demoplan.estimate(step, {}, cached=False) == (demoplan.MEASURED_S[step.key],
                                                         "as measured on 2 cores")
    assert demoplan.estimate(Step("run", "mine.yaml"), {}, cached=False)[1] == "a guess"
    assert [demoplan.about(s) for s in (3, 42, 408, 3600)] == [
        "about 5 s", "about 40 s", "about 7 min", "about 60 min"]


def test_a_recorded_file_from_another_cpu_count_or_unreadable_is_ignored(
        tmp_path: Path) -> None:
    from harness import demoplan

    (tmp_path / demoplan.TIMES_FILE).write_text(json.dumps(
        {"cpus": (os.cpu_count() or 1) + 1, "seconds": {"report": 3.0}}))
    assert demoplan.load_times(tmp_path) == {}
    (tmp_path / demoplan.TIMES_FILE).write_text("{not json")
    assert demoplan.load_times(tmp_path) == {}


def test_run_plan_times_each_step_and_keeps_a_cached_builds_old_figure(tmp_path: Path) -> None:
    from harness import demoplan
    from harness.demoplan import Step

    ticks = iter([0.0, 1.0, 4.0, 10.0, 11.0, 20.0, 50.0])
    said: list[str] = []
    demoplan.save_times(tmp_path, {"build host-release": 300.0})
    steps = [Step("build", "host-release"), Step("run", demoplan.SMOKE)]
    measured = sum(demoplan.MEASURED_S[k] for k in ("build host-release",
                                                    f"run {demoplan.SMOKE}", "report"))
    assert demoplan.first_report([*steps, Step("report", "x")], {}, lambda step: False) == (
        f", the first report in {demoplan.about(measured)}")
    demoplan.run_plan(steps, lambda step: f"did {step.key}", said.append,
                      lambda step: step.kind == "build", tmp_path, clock=lambda: next(ticks))
    assert said == [
        "2 steps; next: finding host-release (llama-bench from the vendored llama.cpp), "
        "about 5 s (cached); all that is left, about 15 s",
        "did build host-release (3 s; 10 s since the demo started); next: running "
        f"{demoplan.SMOKE}, about 10 s (as measured on 2 cores)",
        f"did run {demoplan.SMOKE} (9 s; 50 s since the demo started); that was the last step"]
    assert demoplan.load_times(tmp_path) == {"build host-release": 300.0,
                                             f"run {demoplan.SMOKE}": 9.0}
