"""The farm's command line, and Dask as an optional extra."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "matrices" / "smoke.yaml")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def without_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the farm extra were not installed: importing distributed fails."""
    monkeypatch.setitem(sys.modules, "distributed", None)


@pytest.mark.parametrize("args", [
    ["run", SMOKE, "--backend", "dask", "--scheduler", "tcp://127.0.0.1:9"],
    ["farm", "agent", "--scheduler", "tcp://127.0.0.1:9"],
    ["farm", "scheduler", "--dry-run"],
])
def test_the_farm_without_dask_is_a_clear_error_not_a_traceback(
    without_dask: None, args: list[str]
) -> None:
    code, output = invoke(*args)
    assert code == 2, output
    assert "pip install 'harness[farm]'" in output
    assert "Traceback" not in output


def test_harness_loads_without_importing_dask() -> None:
    code = ("import sys, harness.cli, harness.farm.driver, harness.farm.agent; "
            "assert not {'dask', 'distributed'} & set(sys.modules), 'dask imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def test_only_the_farm_package_imports_dask() -> None:
    pattern = re.compile(r"^\s*(import|from)\s+(dask|distributed)\b", re.MULTILINE)
    offenders = [str(path.relative_to(REPO)) for path in (REPO / "harness").rglob("*.py")
                 if "farm" not in path.relative_to(REPO / "harness").parts
                 and pattern.search(path.read_text())]
    assert offenders == []


def test_dask_backend_needs_a_scheduler() -> None:
    code, output = invoke("run", SMOKE, "--backend", "dask")
    assert code == 2
    assert "--backend dask needs --scheduler ADDR" in output


def test_virtual_phones_are_not_started_by_a_farm_run() -> None:
    code, output = invoke("run", SMOKE, "--backend", "dask", "--scheduler", "tcp://x:1",
                          "--devices", "sim:2")
    assert code == 2
    assert "--devices sim:N starts phones on this host" in output


def test_scheduler_binds_to_localhost_without_dashboard_by_default() -> None:
    code, output = invoke("farm", "scheduler", "--dry-run", "--port", "0")
    assert code == 0, output
    assert "-m distributed.cli.dask_scheduler --host 127.0.0.1 --port 0 --no-dashboard" in output
    assert "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=2" in output
    assert "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=120s" in output
    code, output = invoke("farm", "scheduler", "--dry-run", "--dashboard-address", ":8787")
    assert "--dashboard --dashboard-address :8787" in output


def test_agent_tags_must_be_kind_colon_value() -> None:
    code, output = invoke("farm", "agent", "--scheduler", "tcp://127.0.0.1:9", "--tag", "rack")
    assert code == 2
    assert "--tag 'rack': write KIND:VALUE" in output
