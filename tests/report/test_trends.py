"""Which sides the report compares when the user names none, one or both (with engines)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from analysis.factory import START, cell, trial, write

from harness.analysis.frames import Side
from harness.errors import ConfigError
from harness.report.trends import SideChoice, pick_sides
from harness.store import read_table

PY = "llama-cpp-python"


def _store(root: Path, builds: tuple[str, ...] = ("b1", "b2"), python: bool = True,
           shared_engine_build: bool = False) -> pd.DataFrame:
    records = [trial(cell(build=b), rep=i, run_id=b, started_at=START + timedelta(days=n))
               for n, b in enumerate(builds) for i in range(3)]
    if python:
        records += [trial(cell(build="device-python", engine=PY), rep=i, run_id="py",
                          engine=PY) for i in range(3)]
    if shared_engine_build:  # a generic engine run with build b1's files
        records += [trial(cell(build="b1", engine="engines/x.yaml"), rep=i, run_id="x",
                          engine="engines/x.yaml") for i in range(3)]
    write(root, records)
    return read_table(root, "trials")


def test_no_names_compares_the_two_builds_of_the_engine_that_has_two(tmp_path: Path) -> None:
    base, cand, note = pick_sides(_store(tmp_path), SideChoice())
    assert (base, cand) == (Side("b1"), Side("b2"))
    assert note == "the two builds of llama-bench in scope, older one as baseline"


def test_one_named_side_pairs_with_the_other_build_of_its_engine(tmp_path: Path) -> None:
    trials = _store(tmp_path)
    assert pick_sides(trials, SideChoice(candidate="b1"))[:2] == (Side("b2"), Side("b1"))
    assert pick_sides(trials, SideChoice(baseline_engine=PY, candidate="b2"))[:2] == (
        Side("device-python", PY), Side("b2"))


def test_three_builds_of_one_engine_need_names(tmp_path: Path) -> None:
    base, cand, note = pick_sides(_store(tmp_path, ("b1", "b2", "b3"), python=False),
                                  SideChoice())
    assert base is None and cand is None
    assert note == "3 build(s) in scope; pass --baseline and --candidate to compare two of them"


def test_a_build_of_two_engines_needs_its_engine_named(tmp_path: Path) -> None:
    trials = _store(tmp_path, shared_engine_build=True)
    with pytest.raises(ConfigError, match=r"--baseline 'b1' has trials of several engines "
                                          r"\(engines/x.yaml, llama-bench\): pass "
                                          r"--baseline-engine ENGINE"):
        pick_sides(trials, SideChoice(baseline="b1", candidate="b2"))
    named = SideChoice(baseline="b1", baseline_engine="engines/x.yaml", candidate="b2")
    assert pick_sides(trials, named)[:2] == (Side("b1", "engines/x.yaml"), Side("b2"))
