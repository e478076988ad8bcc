"""Trials alternate builds within a configuration and keep stable ids."""

from __future__ import annotations

from dataclasses import replace

from harness.cell import Cell
from harness.run.order import interleave

BASE = Cell("A", "tiny", "Q4_K_M", 512, "f16", "f16", 2, "all", "auto", True, 512, 512,
            32, 16, 0, 3)


def test_two_builds_alternate_on_every_repetition() -> None:
    cells = [BASE, replace(BASE, build="B")]
    trials = interleave(cells, "run1", "dev1")
    assert [(t.cell.build, t.rep) for t in trials] == [
        ("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 2)]


def test_configurations_run_one_after_another() -> None:
    other = replace(BASE, n_ctx=1024, repetitions=1)
    trials = interleave([BASE, other, replace(BASE, build="B")], "run1", "dev1")
    configs = [t.cell.n_ctx for t in trials]
    assert configs == [512] * 6 + [1024]


def test_trial_ids_are_unique_and_stable() -> None:
    cells = [BASE, replace(BASE, build="B")]
    first = [t.trial_id for t in interleave(cells, "run1", "dev1")]
    again = [t.trial_id for t in interleave(cells, "run1", "dev1")]
    assert first == again
    assert len(set(first)) == len(first)
    assert first[0].startswith("run1/dev1/")


def test_job_groups_builds_of_one_configuration_on_one_device() -> None:
    trials = interleave([BASE, replace(BASE, build="B")], "run1", "dev1")
    assert len({t.job_id for t in trials}) == 1
    other_device = interleave([BASE], "run1", "dev2")
    assert other_device[0].job_id != trials[0].job_id
