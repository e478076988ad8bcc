"""The farm's command line, and Dask as an optional extra."""

from __future__ import annotations

import json
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
    code, output = invoke("farm", "scheduler", "--dry-run", "--port", "0", "--insecure")
    assert code == 0, output
    assert "farm scheduler: --insecure: plaintext and no credentials" in output
    assert "-m distributed.cli.dask_scheduler --host 127.0.0.1 --port 0 --no-dashboard" in output
    assert "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=2" in output
    assert "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=120s" in output
    code, output = invoke("farm", "scheduler", "--dry-run", "--dashboard-address", ":8787",
                          "--insecure")
    assert "--dashboard --dashboard-address 127.0.0.1:8787" in output


def test_agent_tags_must_be_kind_colon_value() -> None:
    code, output = invoke("farm", "agent", "--scheduler", "tcp://127.0.0.1:9", "--insecure",
                          "--tag", "rack")
    assert code == 2
    assert "--tag 'rack': write KIND:VALUE" in output


def test_init_makes_a_ca_and_a_certificate_per_role_and_never_overwrites(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    code, output = invoke("farm", "init", str(folder), "--json")
    assert code == 0, output
    names = set(json.loads(output)["files"])
    assert names == {"ca.pem", "ca.key", "scheduler.pem", "scheduler.key", "agent.pem",
                     "agent.key", "driver.pem", "driver.key"}
    for name in names:  # keys readable by their owner only
        mode = (folder / name).stat().st_mode & 0o777
        assert mode == (0o600 if name.endswith(".key") else 0o644), (name, oct(mode))
    # each role's certificate is signed by the farm's CA, and usable both ways (Dask dials both)
    for role in ("scheduler", "agent", "driver"):
        check = subprocess.run(["openssl", "verify", "-CAfile", str(folder / "ca.pem"),
                                "-purpose", "sslclient", str(folder / f"{role}.pem")],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0 and ": OK" in check.stdout, check.stdout + check.stderr
    before = (folder / "ca.key").read_bytes()
    code, output = invoke("farm", "init", str(folder))
    assert code == 2 and "already holds a farm CA" in output and "Traceback" not in output
    assert (folder / "ca.key").read_bytes() == before


def test_every_farm_command_wants_credentials_or_an_explicit_insecure(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    invoke("farm", "init", str(folder))
    for args in (["farm", "scheduler", "--dry-run"],
                 ["farm", "agent", "--scheduler", "tls://127.0.0.1:9"],
                 ["run", SMOKE, "--backend", "dask", "--scheduler", "tls://127.0.0.1:9"]):
        code, output = invoke(*args)
        assert code == 2 and "no credentials; pass --tls DIR" in output, output
        assert "or --insecure" in output and len(output.strip().splitlines()) == 1
        code, output = invoke(*args, "--tls", str(folder), "--insecure")
        assert code == 2 and "--tls and --insecure together" in output, output
    code, output = invoke("farm", "scheduler", "--dry-run", "--tls", str(tmp_path / "none"))
    assert code == 2 and "ca.pem is missing" in output and "harness farm init" in output
    code, output = invoke("run", SMOKE, "--backend", "dask", "--scheduler", "tcp://127.0.0.1:9",
                          "--tls", str(folder))
    assert code == 2 and "the farm runs on TLS; write tls://127.0.0.1:9" in output


def test_the_tls_scheduler_takes_encrypted_connections_only(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    invoke("farm", "init", str(folder))
    code, output = invoke("farm", "scheduler", "--dry-run", "--tls", str(folder))
    assert code == 0, output
    assert "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True" in output
    assert (f"--protocol tls --tls-ca-file {folder / 'ca.pem'} --tls-cert "
            f"{folder / 'scheduler.pem'} --tls-key {folder / 'scheduler.key'}") in output
