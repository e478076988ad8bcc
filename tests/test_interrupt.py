"""SIGTERM stops a long command as Ctrl-C does, and nothing it started is left running (issue
51: a bench stopped by a time limit left five phone daemons and their apps behind).

Each end-to-end test starts the command with a token of its own in the environment (every
process it starts inherits it, the phone daemons and adb servers included), sends SIGTERM in
the middle of its work, and then finds no process with that token, nor any process of a
virtual phone under its folder (the phone's shells and engines carry HARNESS_PHONE_ROOT).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from virtual.procwait import wait_for

from harness import store
from harness.artifacts.builds import Build
from harness.interrupt import Interrupted, interruptible
from harness.virtual.control import DAEMON_MODULE

REPO = Path(__file__).resolve().parents[1]
MARK = "HARNESS_INTERRUPT_TEST"
HARNESS = [sys.executable, "-c", "from harness.cli import main; main()"]
EXIT_SIGTERM = 128 + signal.SIGTERM


def test_sigterm_raises_once_as_ctrl_c_does_and_the_handlers_are_put_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[str] = []
    with pytest.raises(Interrupted) as stopped, interruptible():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # a second signal while cleaning up: ignored
            seen.append("cleaned up")
    assert stopped.value.signum == signal.SIGTERM and isinstance(stopped.value, KeyboardInterrupt)
    assert seen == ["cleaned up"]
    assert signal.getsignal(signal.SIGTERM) == before


def _processes(token: str, root: Path) -> dict[int, str]:
    """Live processes carrying ``token`` or belonging to a virtual phone under ``root``."""
    found: dict[int, str] = {}
    mark = f"{MARK}={token}".encode()
    phone = f"HARNESS_PHONE_ROOT={root}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except (OSError, IndexError):
            continue
        if state != "Z" and (mark in variables or any(v.startswith(phone) for v in variables)):
            found[int(entry.name)] = command.strip()
    return found


def _stop_mid_work(argv: list[str], root: Path, busy: Callable[[dict[int, str]], bool],
                   log: Path, env: dict[str, str] | None = None) -> tuple[int, dict[int, str]]:
    """Start ``argv``; once ``busy`` holds for its processes, SIGTERM it; its exit code and
    the processes of its own still alive 10 s after it exited (all SIGKILLed afterwards)."""
    token = secrets.token_hex(8)
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                   env={**os.environ, **(env or {}), MARK: token})
        try:
            assert wait_for(lambda: busy(_processes(token, root)), 300, step=0.02), \
                log.read_text()[-3000:]
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=120)
            wait_for(lambda: not _processes(token, root), 10)
            left = _processes(token, root)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for pid in _processes(token, root):  # ours by the token: stopped by pid
                os.kill(pid, signal.SIGKILL)
    return code, left


def _engine_running(processes: dict[int, str]) -> bool:
    return any("llama-bench" in command for command in processes.values())


@pytest.mark.slow
def test_sigterm_stops_the_demo_mid_trial_and_leaves_nothing_running(
        host_build: Build, tiny_ladder: dict[str, Path], tmp_path: Path) -> None:
    """The demo's private adb server, its phone (daemon, apps, shells) and the engine in flight
    are all stopped; the trial that was cut is not stored (``--resume`` would run it)."""
    root = tmp_path / "demo"
    code, left = _stop_mid_work(
        [*HARNESS, "demo", "--root", str(root), "--phones", "1", "--matrix",
         str(REPO / "matrices" / "smoke.yaml")], root, _engine_running, tmp_path / "demo.log")
    log = (tmp_path / "demo.log").read_text()
    assert code == EXIT_SIGTERM, log[-3000:]
    assert left == {}, log[-3000:]
    assert "stopped by SIGTERM" in log
    trials = store.read_table(root / "results" / "demo", "trials")
    assert set(trials["outcome"]) <= {"ok"}, trials[["outcome", "error"]]


@pytest.mark.slow
def test_sigterm_stops_a_compile_with_every_process_it_started(tmp_path: Path) -> None:
    """``harness build llama.cpp``: cmake, ninja and what ninja runs (here a step that would
    take two minutes) are stopped with the command."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\n"
        'project("llama.cpp" NONE)\n'
        "add_custom_target(llama-bench ALL COMMAND sleep 120)\n")
    root = tmp_path / "builds"
    code, left = _stop_mid_work(
        [*HARNESS, "build", "llama.cpp", "--source", str(tree), "--name", "slow-step",
         "--builds", str(root), "--target", "llama-bench"], tmp_path,
        lambda found: any(c.startswith("sleep 120") for c in found.values()),
        tmp_path / "build.log", env={"HARNESS_CACHE": str(tmp_path / "cache")})
    assert code == EXIT_SIGTERM, (tmp_path / "build.log").read_text()[-3000:]
    assert left == {}
    assert not (root / "slow-step").exists()


@pytest.mark.slow
def test_sigterm_stops_the_bench_and_its_phones(host_build: Build, tmp_path: Path) -> None:
    """``python -m bench.run``, stopped by a time limit: its phones and adb server go."""
    code, left = _stop_mid_work(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "push"], tmp_path,
        lambda found: any(DAEMON_MODULE in c for c in found.values()), tmp_path / "bench.log")
    assert code == EXIT_SIGTERM, (tmp_path / "bench.log").read_text()[-3000:]
    assert left == {}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_sigterm_stops_a_test_session_and_its_fixtures_phones(tmp_path: Path,
                                                             workers: list[str]) -> None:
    """pytest itself (a CI job's time limit): the fixtures are torn down, the phone with them;
    with two test processes (./dev test), SIGTERM to the one nox started stops both."""
    target = REPO / "tests" / "data" / "interrupt" / "hold_phone.py"
    code, left = _stop_mid_work(
        [sys.executable, "-m", "pytest", str(target), "-p", "no:cacheprovider", "-q", *workers,
         "--basetemp", str(tmp_path / "session")], tmp_path,
        lambda found: any(DAEMON_MODULE in c for c in found.values()), tmp_path / "pytest.log")
    log = (tmp_path / "pytest.log").read_text()
    assert code == pytest.ExitCode.INTERRUPTED, log[-3000:]
    assert left == {}, log[-3000:]
