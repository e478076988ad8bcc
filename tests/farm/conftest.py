"""Fixtures of the farm tests: two "hosts" (each its own adb server), three virtual phones (two
on alpha, one on beta), a scheduler and one agent per host, shared by the tests of a module.
bench/ (figure 3 splits the farm's set-up from its engine time) is made importable, as in
tests/benchsuite."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from farmkit import Farm, local_farm

from harness.testing.adbserver import AdbServer, private_adb_server
from harness.virtual.control import connect, disconnect, start_phones, stop_phones

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MATRIX = """
name: {name}
axes:
  build: [host-release]
  model: [tiny]
  quant: {quants}
  n_ctx: [256]
  kv: [f16]
  threads: [1]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: {n_gen}, n_depth: 0}}
repetitions: {reps}
cooldown: {{max_thermal_status: 6, max_temperature_c: 95, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 120}}
"""


def write_matrix(folder: Path, name: str, quants: list[str], reps: int, n_gen: int = 16) -> Path:
    """One job per quant on each phone (the configuration), ``reps`` trials per job."""
    path = folder / f"{name}.yaml"
    path.write_text(MATRIX.format(name=name, quants=quants, reps=reps, n_gen=n_gen))
    return path


@dataclass
class FarmSetup:
    farm: Farm
    hosts: dict[str, AdbServer]
    host_of: dict[str, str]  # serial -> host holding the phone
    phones: list[str]  # alpha, alpha, beta


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarmSetup]:
    """The farm; beta's agent does not restart dead workers (the failure test needs one)."""
    root = tmp_path_factory.mktemp("farm")
    home = root / "sim"
    with private_adb_server(root / "adb-alpha") as alpha, \
            private_adb_server(root / "adb-beta") as beta, \
            pytest.MonkeyPatch.context() as env:
        for key, value in alpha.env.items():
            env.setenv(key, value)
        try:
            phones = [p.serial for p in start_phones("midrange-8gb", 3, home=home,
                                                       abi="x86_64")]
            disconnect(phones[2], alpha.port)  # the third phone is plugged into beta
            connect(phones[2], beta.port)
            hosts = {"alpha": alpha, "beta": beta}
            with local_farm(root / "procs", hosts) as farm:
                farm.start_agent("alpha")
                farm.start_agent("beta", max_restarts=0)
                yield FarmSetup(farm, hosts, {phones[0]: "alpha", phones[1]: "alpha",
                                              phones[2]: "beta"}, phones)
        finally:
            stop_phones(home=home)
