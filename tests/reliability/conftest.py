"""Fixtures of the reliability suite: the fault table, printed and written at the end.

Each fault test asks ``fault_row(name)`` for a row and fills in whether the fault was injected and
what the store audit found; whether it survived is the test's own result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TABLE_FILE = HERE / "last_fault_table.md"


# --- the fault table ---------------------------------------------------------------------------


@dataclass
class FaultRow:
    fault: str
    injected: bool = False
    lost: int | None = None
    duplicated: int | None = None
    trials: int = 0
    survived: bool = False
    note: str = ""


@dataclass
class FaultTable:
    rows: list[FaultRow] = field(default_factory=list)

    def markdown(self) -> str:
        lines = ["| fault | injected | survived | trials | trials lost | duplicated |",
                 "|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(
                f"| {r.fault} | {'yes' if r.injected else 'NO'} | "
                f"{'yes' if r.survived else 'NO'} | {r.trials} | "
                f"{'-' if r.lost is None else r.lost} | "
                f"{'-' if r.duplicated is None else r.duplicated} |")
        return "\n".join(lines) + "\n"


_TABLE = FaultTable()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_OUTCOME] = report.passed
    return report


_OUTCOME = pytest.StashKey[bool]()


@pytest.fixture
def fault_row(request: pytest.FixtureRequest) -> Iterator[Callable[..., FaultRow]]:
    """``row = fault_row("engine SIGSEGV")``; the test fills it, its result says survived."""
    made: list[FaultRow] = []

    def make(name: str) -> FaultRow:
        row = FaultRow(name)
        made.append(row)
        return row

    yield make
    passed = request.node.stash.get(_OUTCOME, False)
    for row in made:
        row.survived = passed and row.injected and row.lost == 0 and row.duplicated == 0
        _TABLE.rows.append(row)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _TABLE.rows:
        return
    text = _TABLE.markdown()
    terminalreporter.write_sep("=", "fault table (trials lost and duplicated must be 0)")
    terminalreporter.write(text)
    header = ("# Last fault table\n\nWritten by `nox -s reliability` "
              "(tests/reliability); docs/reliability.md carries a copy.\n\n")
    TABLE_FILE.write_text(header + text)


@pytest.fixture
def sim_env(adb_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HARNESS_HOME for subprocess runs, inside the test's tmp folder."""
    home = tmp_path / "harness-home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    return home


def environ() -> dict[str, str]:
    return dict(os.environ)
