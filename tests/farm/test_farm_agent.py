"""The agent keeps one worker process per online phone: start, stop, restart, give up.

Real processes stand in for the Dask workers (a sleeping Python), so the agent's process handling
is exercised for real; every one is stopped by its pid at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.errors import DeviceError
from harness.farm.agent import Agent, AgentConfig, worker_argv, worker_env


def test_worker_command_is_one_thread_named_after_the_phone_with_its_resources() -> None:
    config = AgentConfig(scheduler="tcp://10.0.0.1:8786", host="lab-2", listen_host="10.0.0.5",
                         tags=(("rack", "a3"),), python="/venv/bin/python")
    argv = worker_argv(config, "127.0.0.1:5555", soc="SM8550")
    assert argv[:4] == ["/venv/bin/python", "-m", "distributed.cli.dask_worker",
                        "tcp://10.0.0.1:8786"]

    def value(option: str) -> str:
        return argv[argv.index(option) + 1]

    assert value("--nthreads") == "1" and value("--nworkers") == "1"
    assert value("--name") == "127.0.0.1:5555@lab-2"
    assert value("--host") == "10.0.0.5"
    assert "--no-nanny" in argv and "--no-dashboard" in argv
    assert value("--dashboard-address") == "127.0.0.1:0"  # Dask's default is every interface
    assert "--preload" not in argv  # plaintext: no certificates, no roles to check
    resources = dict(pair.split("=") for pair in value("--resources").split())
    assert resources == {"device:127_0_0_1_5555": "1", "host:lab_2": "1", "rack:a3": "1",
                         "soc:SM8550": "1"}


class Phones:
    """What the adb server lists; a test plugs and unplugs phones by editing ``online``."""

    def __init__(self) -> None:
        self.online: set[str] = set()
        self.fail = False

    def __call__(self) -> set[str]:
        if self.fail:
            raise DeviceError("cannot reach the adb server on port 5037")
        return set(self.online)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, Phones, list[tuple[str, dict[str, Any]]]]]:
    started: list[subprocess.Popen[bytes]] = []

    def launcher(argv: Sequence[str], log: Path,
                 env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        started.append(process)
        return process

    phones = Phones()
    events: list[tuple[str, dict[str, Any]]] = []
    config = AgentConfig(scheduler="tcp://127.0.0.1:1", host="alpha", max_restarts=1,
                         log_dir=tmp_path)
    subject = Agent(config, online=phones, soc=lambda serial: None, launcher=launcher,
                    on_event=lambda kind, details: events.append((kind, details)))
    try:
        yield subject, phones, events
    finally:
        subject.close()
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait()


def kinds(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [kind for kind, _ in events]


def test_a_worker_runs_without_dasks_statistical_profiler(tmp_path: Path) -> None:
    import dask.config

    env = worker_env(AgentConfig(scheduler="tcp://10.0.0.1:8786", host="lab",
                                 cache_dir=tmp_path))
    found = dask.config.collect_env(env)  # what the worker's Dask reads from its environment
    assert found["distributed"]["worker"]["profile"]["enabled"] is False
    assert env["HARNESS_FARM_CACHE"] == str(tmp_path)


def test_a_plugged_phone_gets_a_worker_and_an_unplugged_one_loses_it(agent: Any) -> None:
    subject, phones, events = agent
    phones.online = {"A", "B"}
    subject.step()
    workers = subject.workers()
    assert set(workers) == {"A", "B"}
    subject.step()  # nothing changed: nothing started again
    assert subject.workers() == workers
    phones.online = {"B"}
    subject.step()
    assert set(subject.workers()) == {"B"}
    with pytest.raises(ChildProcessError):
        os.waitpid(workers["A"], os.WNOHANG)  # stopped and reaped
    assert kinds(events) == ["started", "started", "stopped"]


def test_a_worker_that_dies_is_restarted_until_the_cap_then_left_alone(agent: Any) -> None:
    subject, phones, events = agent
    phones.online = {"A"}
    subject.step()
    first = subject.workers()["A"]
    os.kill(first, signal.SIGKILL)
    subject.slots["A"].process.wait()
    subject.step()
    second = subject.workers()["A"]
    assert second != first
    os.kill(second, signal.SIGKILL)
    subject.slots["A"].process.wait()
    subject.step()  # max_restarts=1: given up
    subject.step()
    assert subject.workers() == {}
    assert kinds(events) == ["started", "died", "started", "given_up"]
    # unplugging and plugging the phone again gives it a fresh start
    phones.online = set()
    subject.step()
    phones.online = {"A"}
    subject.step()
    assert set(subject.workers()) == {"A"}


def test_an_unreachable_adb_server_keeps_the_workers_running(agent: Any) -> None:
    subject, phones, events = agent
    phones.online = {"A"}
    subject.step()
    phones.fail = True
    subject.step()
    assert set(subject.workers()) == {"A"}
    assert kinds(events)[-1] == "adb_error"
    subject.close()
    assert subject.workers() == {}


def test_a_worker_that_dies_at_start_says_why_from_its_log(tmp_path: Path) -> None:
    """The cause a worker wrote before it died (this start's lines, not an earlier one's) is in
    the died and given_up events the agent prints on its terminal."""
    starts = iter(["ValueError: an earlier start's failure", "OSError: [Errno 99] Cannot "
                   "assign requested address: ('10.9.9.9', 0)"])
    started: list[subprocess.Popen[bytes]] = []

    def launcher(argv: Sequence[str], log: Path,
                 env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        line = next(starts, "")
        with open(log, "ab") as out:
            process = subprocess.Popen([sys.executable, "-c", f"print({line!r}); raise "
                                        "SystemExit(1)"], stdout=out)
        process.wait()
        started.append(process)
        return process

    events: list[tuple[str, dict[str, Any]]] = []
    config = AgentConfig(scheduler="tcp://127.0.0.1:1", host="alpha", max_restarts=1,
                         log_dir=tmp_path)
    subject = Agent(config, online=lambda: {"A"}, soc=lambda serial: None, launcher=launcher,
                    on_event=lambda kind, details: events.append((kind, details)))
    subject.step()  # started
    subject.step()  # died: restarted
    subject.step()  # given up
    log = str(tmp_path / "device-A.log")
    assert kinds(events) == ["started", "died", "started", "given_up"]
    assert events[1][1]["cause"] == "ValueError: an earlier start's failure"
    assert events[1][1]["log"] == log
    assert events[3][1]["cause"] == \
        "OSError: [Errno 99] Cannot assign requested address: ('10.9.9.9', 0)"
    assert len(started) == 2
