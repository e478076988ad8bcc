"""A secured farm across network namespaces: two agent hosts, two phones each, network faults.

The test makes its own namespaces (``harness.testing.netns``): ``ctl`` holds the scheduler and
the driver on a bridge at 10.231.0.1, hosts ``h1`` and ``h2`` (10.231.0.11 and .12) each an adb
server, an agent and its own host name. The four virtual phones run on this machine; a relay
plugs each one into its host's namespace like a USB cable, so a host reaches only its own phones,
and a phone can be moved to the other host. Everything runs on the farm's TLS certificates and
the real ``harness`` commands; traffic stays between the namespaces the test made. The agents
are started with no ``--listen-host``: their workers bind their host's address on the route to
the scheduler. Certificates carry their role: one used in the wrong role (an agent's as a
driver, a driver's as a worker, one from before roles) is refused with one scheduler log line.
Every other farm process checks roles too: a worker takes a handler call (``run``: code) only
from the scheduler's certificate, the data transfer a peer worker asks (``get_data``) also from
the agent's; the artifact service serves only the agent's; and the HTTP routes of the scheduler
and the workers listen on 127.0.0.1 only.

Faults: an agent host's link goes down mid-run for longer than the scheduler's worker TTL, and an
agent host is killed outright mid-run (its link cut, every process of it SIGKILLed) and its
phones moved to the other host: its job in flight waits out the dead worker's device lease
(same run, another host: nobody renews it) and runs there, its queued jobs follow. Each fault adds
a row to the fault table: every trial stored once, none lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from farmcerts import pre_role_certificate

from harness import store
from harness.artifacts.builds import Build
from harness.device.lease import LEASE_PATH, Holder
from harness.farm.security import REQUIRE_ENCRYPTION_ENV, FarmTLS, init_farm
from harness.testing import netns
from harness.virtual.control import start_phones, stop_phones

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

HARNESS = str(Path(sys.executable).parent / "harness")
WORKER_TTL_S = 15  # the scheduler drops a worker silent this long (the default is 120 s)
LEASE_TTL_S = 60  # harness.device.lease.DEFAULT_TTL_S, what a dead worker's lease lasts
QUANTS = ["Q8_0", "Q4_K_M", "Q6_K"]
REPS = 2
REFUSED = "harness farm: refused "
# a Dask client with the certificate of ROLE in the folder: prints its workers, or the error
CLIENT = """
import json, pathlib, sys
from distributed import Client
from harness.farm.security import FarmTLS
from harness.farm.naming import farm_phones
try:
    client = Client(sys.argv[1], timeout="20s", set_as_default=False,
                    security=FarmTLS(pathlib.Path(sys.argv[2]), sys.argv[3]).security())
except Exception as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
else:
    workers = client.scheduler_info(n_workers=-1)["workers"]
    print(json.dumps({"phones": farm_phones(workers),
                      "addresses": {str(w["name"]): a for a, w in workers.items()}}))
    client.close()
"""


def matrix(name: str) -> dict[str, Any]:
    """One job per quant on each phone, REPS trials a job, on the tiny model."""
    return {"name": name, "repetitions": REPS, "models": {"tiny": {"ladder": "tiny"}},
            "axes": {"build": ["host-release"], "model": ["tiny"], "quant": QUANTS,
                     "n_ctx": [256], "kv": ["f16"], "threads": [1]},
            "workload": {"n_prompt": 32, "n_gen": 16, "n_depth": 0},
            "cooldown": {"max_thermal_status": 6, "max_temperature_c": 95,
                         "min_battery_pct": 0, "max_wait_s": 1},
            "timeout": {"trial_s": 120}}

# a Dask rpc call from a host with the certificate of ROLE to the worker at ADDRESS: OP is `run`
# (a handler that runs code: here socket.gethostname) or `get_data` (what a peer worker asks)
WORKER_CALL = """
import asyncio, json, pathlib, socket, sys
from distributed.core import ConnectionPool, rpc
from distributed.protocol.pickle import dumps
from distributed.worker import get_data_from_worker
from harness.farm.security import FarmTLS
address, folder, role, op = sys.argv[1:5]
args = FarmTLS(pathlib.Path(folder), role).security().get_connection_args("client")
async def call():
    if op == "get_data":
        pool = await ConnectionPool(connection_args=args)
        try:
            return await get_data_from_worker(pool, [], address)
        finally:
            await pool.close()
    async with rpc(address, connection_args=args) as worker:
        return await worker.run(function=dumps(socket.gethostname))
try:
    answer = asyncio.run(call())
except Exception as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
else:  # a handler's error comes back as an answer (what Client.run raises)
    failed = isinstance(answer, dict) and answer.get("status") == "error"
    print(json.dumps({"error": answer["exception_text"]} if failed else {"answer": repr(answer)}))
"""
# the driver's artifact service for one file, in the namespace it is started in
ARTIFACTS = """
import json, logging, pathlib, sys, time
from harness.farm.artifacts import ArtifactService
from harness.farm.security import FarmTLS
logging.basicConfig(level=logging.WARNING)
host, folder, blob, sha = sys.argv[1:5]
service = ArtifactService({sha: pathlib.Path(blob)}, host=host,
                          tls=FarmTLS(pathlib.Path(folder), "driver")).start()
print(json.dumps({"url": service.url, "token": service.token}), flush=True)
time.sleep(300)
"""
# a GET of URL from a host with the certificate of ROLE and the run's token: status and reason
FETCH = """
import json, pathlib, sys, urllib.error, urllib.request
from harness.farm.security import FarmTLS
url, folder, role, token = sys.argv[1:5]
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
context = FarmTLS(pathlib.Path(folder), role).client_context()
try:
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        print(json.dumps({"status": response.status, "bytes": len(response.read())}))
except urllib.error.HTTPError as error:
    print(json.dumps({"status": error.code, "reason": error.reason}))
"""


@dataclass
class Lab:
    net: netns.Network
    root: Path
    tls: Path
    scheduler: str
    phones: dict[str, list[str]]  # host -> serials plugged into it
    agents: dict[str, subprocess.Popen[bytes]]
    scheduler_pid: int = 0

    def start_agent(self, host: str, tls: Path | None = None, name: str | None = None,
                    insecure: bool = False) -> subprocess.Popen[bytes]:
        name = name or host
        security = ["--insecure"] if insecure else ["--tls", str(tls or self.tls)]
        scheduler = self.scheduler.replace("tls://", "tcp://") if insecure else self.scheduler
        process = self.net.popen(host, [
            HARNESS, "farm", "agent", "--scheduler", scheduler, "--name", name,
            "--poll", "0.3", "--no-soc-tag",  # no --listen-host: the route's address
            "--log-dir", str(self.root / f"logs-{name}"),
            "--cache", str(self.root / f"cache-{host}"), "--json", *security],
            env={**os.environ, **self.net.adb_server(host).env, "PYTHONUNBUFFERED": "1"},
            log=self.root / f"agent-{name}.jsonl")
        self.agents[name] = process
        return process

    def scheduler_log(self) -> str:
        return (self.root / "scheduler.log").read_text(errors="replace")

    def refusals(self) -> list[str]:
        """The scheduler's lines for requests refused by the role in a peer's certificate."""
        return [line for line in self.scheduler_log().splitlines() if REFUSED in line]

    def client(self, host: str, tls: Path, role: str) -> dict[str, Any]:
        """A Dask client in ``host`` with ``role``'s certificate of ``tls``: the farm's phones
        and worker addresses, or the error it got."""
        done = self.net.run(host, [sys.executable, "-c", CLIENT, self.scheduler, str(tls), role],
                            timeout=90)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def workers(self) -> dict[str, str]:
        """serial -> worker name on the scheduler (asked from ctl with the driver's certificate)."""
        phones = self.client("ctl", self.tls, "driver")["phones"]
        return dict(phones)

    def agent_first_line(self, name: str) -> dict[str, Any]:
        return dict(json.loads((self.root / f"agent-{name}.jsonl").read_text().splitlines()[0]))

    def wait_for_workers(self, expected: dict[str, str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while (seen := self.workers()) != expected:
            assert time.monotonic() < deadline, f"workers {seen}, expected {expected}"
            time.sleep(1)

    def expected_workers(self) -> dict[str, str]:
        return {s: f"{s}@{host}" for host, serials in self.phones.items() for s in serials}


def _scheduler_address(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text())["address"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    problem = netns.netns_unavailable()
    if problem:
        pytest.skip(f"no network namespaces here: {problem}")
    root = tmp_path_factory.mktemp("farm-net")
    home = root / "sim"
    tls = root / "tls"
    init_farm(tls)
    try:
        phones = [p.serial for p in start_phones("midrange-8gb", 4, home=home, abi="x86_64",
                                                   connect_adb=False)]
        with netns.lab_network(["h1", "h2"], root / "net") as net:
            layout = {"h1": phones[:2], "h2": phones[2:]}
            for host, serials in layout.items():
                for serial in serials:
                    net.connect_phone(serial, host)
            address_file = root / "scheduler.json"
            scheduler = net.popen(
                "ctl", [HARNESS, "farm", "scheduler", "--host", net.address("ctl"),
                        "--port", "0", "--scheduler-file", str(address_file),
                        "--worker-ttl", f"{WORKER_TTL_S}s", "--tls", str(tls)],
                log=root / "scheduler.log")
            deadline = time.monotonic() + 60
            while (address := _scheduler_address(address_file)) is None:
                assert time.monotonic() < deadline, (root / "scheduler.log").read_text()
                time.sleep(0.2)
            lab = Lab(net, root, tls, address, layout, {}, scheduler.pid)
            for host in layout:
                lab.start_agent(host)
            lab.wait_for_workers(lab.expected_workers())
            yield lab
    finally:
        stop_phones(home=home)


def run_driver(lab: Lab, name: str, host_build: Build,
               during: Callable[[Path], None] | None = None) -> tuple[dict[str, Any], Path]:
    """``harness run --backend dask`` in ctl; ``during(results)`` runs while it does."""
    folder = lab.root / name
    folder.mkdir()
    matrix_file = folder / "matrix.yaml"
    matrix_file.write_text(yaml.safe_dump(matrix(name)))
    results = folder / "results"
    out = folder / "driver.json"
    driver = lab.net.popen("ctl", [
        HARNESS, "run", str(matrix_file), "--backend", "dask", "--scheduler", lab.scheduler,
        "--tls", str(lab.tls), "--results", str(results), "--builds",
        str(host_build.path.parent), "--json"], env={**os.environ, "PYTHONUNBUFFERED": "1"},
        log=out, errlog=folder / "driver.err")
    try:
        if during is not None:
            during(results)
        driver.wait(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
    text = out.read_text()
    assert driver.returncode == 0, text + (folder / "driver.err").read_text()
    return json.loads(text), results


def stored(results: Path) -> pd.DataFrame:
    try:
        return store.read_table(results, "trials")
    except Exception:  # nothing written yet
        return pd.DataFrame({"trial_id": [], "device_serial": []})


def lease_hosts(lab: Lab) -> set[str]:
    """The hosts whose lease is on one of the lab's phones now (read from the phones' files)."""
    hosts = set()
    for path in (lab.root / "sim" / "phones").glob("*/root" + LEASE_PATH):
        try:
            holder = Holder.parse(path.read_text(errors="replace"))
        except OSError:  # released meanwhile
            continue
        if holder is not None:
            hosts.add(holder.host)
    return hosts


def wait_until(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def audit_run(summary: dict[str, Any], results: Path, lab: Lab) -> tuple[int, int, pd.DataFrame]:
    """(trials lost, trials duplicated, the stored trials) of a run over the lab's phones."""
    trials = stored(results)
    expected = sum(len(s) for s in lab.phones.values()) * len(QUANTS) * REPS
    ok = int((trials["outcome"] == "ok").sum())
    duplicated = int(trials["trial_id"].duplicated().sum()) + int(summary["duplicates_skipped"])
    return expected - ok, duplicated, trials


def test_two_hosts_run_a_matrix_together_on_tls(lab: Lab, host_build: Build,
                                                 tiny_ladder: dict[str, Path]) -> None:
    # no --listen-host: each agent's workers bind its host's address on the route to the
    # scheduler (a host's 127.0.0.1 is out of the scheduler's reach), and its first line says so
    addresses = lab.client("ctl", lab.tls, "driver")["addresses"]
    for host, serials in lab.phones.items():
        first = lab.agent_first_line(host)
        assert (first["listen_host"], first["listen_host_from"]) == (
            lab.net.address(host), f"route to {lab.net.address('ctl')}"), first
        for serial in serials:
            assert str(addresses[f"{serial}@{host}"]).startswith(
                f"tls://{lab.net.address(host)}:"), addresses
    summary, results = run_driver(lab, "together", host_build)
    lost, duplicated, trials = audit_run(summary, results, lab)
    assert (lost, duplicated) == (0, 0), json.dumps(summary)
    assert summary["farm_security"].startswith("tls (mutual, farm CA ")
    assert summary["artifact_bytes_served"] > 0 and summary["artifact_refused"] == 0
    meta = store_meta(results, summary["run_id"])
    assert meta["farm_security"] == summary["farm_security"]
    host_of = {s: h for h, serials in lab.phones.items() for s in serials}
    for job in summary["jobs"]:  # each job ran on its phone's host
        assert job["worker"] == f"{job['serial']}@{host_of[job['serial']]}", job
    assert Counter(trials["device_serial"]) == {s: len(QUANTS) * REPS for s in host_of}


def store_meta(results: Path, run_id: str) -> dict[str, Any]:
    from harness.run.runner import load_run_meta

    return dict(load_run_meta(results, run_id))


def test_an_agent_without_the_farms_certificate_is_refused(lab: Lab, tmp_path: Path) -> None:
    other = tmp_path / "other-farm"
    init_farm(other)
    remote = f"TLS handshake failed with remote 'tls://{lab.net.address('h2')}:"
    # the lab (and its scheduler's log) is shared by the module's tests: an earlier test's link
    # faults may have logged handshakes of their own; judge only what this test's agents caused
    start = len(lab.scheduler_log())
    for name, security in (("rogue", {"tls": other}), ("plain", {"insecure": True})):
        before = lab.scheduler_log().count(remote)
        agent = lab.start_agent("h2", name=name, **security)
        try:
            wait_until(lambda: lab.scheduler_log().count(remote) > before,  # noqa: B023
                       f"the scheduler to refuse the {name} agent's worker", 120)
            seen = lab.workers()
            assert not any(worker.endswith(f"@{name}") for worker in seen.values()), seen
        finally:
            agent.terminate()
            agent.wait(timeout=60)
            lab.agents.pop(name)
    refusals = [line for line in lab.scheduler_log()[start:].splitlines()
                if "TLS handshake failed" in line]
    assert refusals and all(remote in line for line in refusals), refusals
    assert lab.workers() == lab.expected_workers()


def new_refusal(lab: Lab, before: int, timeout: float = 30) -> str:
    """The one refusal line logged since there were ``before``; fails on none or more."""
    deadline = time.monotonic() + timeout
    while len(lines := lab.refusals()) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(lines) == before + 1, lines[before:]
    return lines[-1]


def test_certificates_of_the_wrong_role_are_refused_with_one_line_each(
        lab: Lab, tmp_path: Path) -> None:
    h1, h2 = lab.net.address("h1"), lab.net.address("h2")
    # an agent host's certificate used as a driver (a Dask client)
    before = len(lab.refusals())
    said = lab.client("h2", lab.tls, "agent")
    assert "refused by the farm: a client (driver) needs the driver's certificate, not the " \
        "agent's" in str(said.get("error")), said
    line = new_refusal(lab, before)
    assert f"refused register-client from tls://{h2}:" in line, line
    assert "(certificate 'harness farm agent')" in line, line

    # a worker started with the driver's certificate
    before = len(lab.refusals())
    worker = lab.net.run("h1", [
        sys.executable, "-m", "distributed.cli.dask_worker", lab.scheduler, "--nthreads", "1",
        "--no-nanny", "--no-dashboard", "--name", "rogue@h1", "--host", h1, "--protocol", "tls",
        *FarmTLS(lab.tls, "driver").dask_args()],
        env={**os.environ, **REQUIRE_ENCRYPTION_ENV}, timeout=90)
    assert worker.returncode != 0
    assert "refused by the farm: a worker needs the agent's certificate, not the driver's" in \
        worker.stderr, worker.stderr[-2000:]
    line = new_refusal(lab, before)
    assert f"refused register-worker from tls://{h1}:" in line, line
    assert "(certificate 'harness farm driver')" in line, line

    # a driver certificate from before certificates carried roles
    old = tmp_path / "old-tls"
    shutil.copytree(lab.tls, old)
    pre_role_certificate(old, "driver")
    before = len(lab.refusals())
    said = lab.client("ctl", old, "driver")
    assert "carries no farm role" in str(said.get("error")), said
    line = new_refusal(lab, before)
    assert f"refused register-client from tls://{lab.net.address('ctl')}:" in line, line
    assert "harness farm init DIR --reissue" in line, line
    assert lab.workers() == lab.expected_workers()  # the farm goes on


def call_worker(lab: Lab, host: str, address: str, role: str, op: str) -> dict[str, Any]:
    """``op`` asked of the worker at ``address`` from ``host`` with ``role``'s certificate."""
    done = lab.net.run(host, [sys.executable, "-c", WORKER_CALL, address, str(lab.tls), role, op],
                       timeout=90)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def worker_refusals(lab: Lab, host: str) -> list[str]:
    """The refusal lines in the logs of ``host``'s workers."""
    return [line for log in sorted((lab.root / f"logs-{host}").glob("*.log"))
            for line in log.read_text(errors="replace").splitlines() if REFUSED in line]


def test_a_worker_takes_handler_calls_only_from_the_schedulers_certificate(lab: Lab) -> None:
    addresses = lab.client("ctl", lab.tls, "driver")["addresses"]
    target = str(addresses[f"{lab.phones['h1'][0]}@h1"])
    h2, ctl = lab.net.address("h2"), lab.net.address("ctl")
    # the agent's certificate, which every USB host holds, asking another host's worker to run
    # code; then the driver's, from the driver's machine: each refused with one worker log line
    for host, role, peer in (("h2", "agent", h2), ("ctl", "driver", ctl)):
        before = len(worker_refusals(lab, "h1"))
        said = call_worker(lab, host, target, role, "run")
        reason = f"'run' on a worker needs the scheduler's certificate, not the {role}'s"
        assert said == {"error": repr(PermissionError(f"refused by the farm: {reason}"))}, said
        deadline = time.monotonic() + 30
        while len(lines := worker_refusals(lab, "h1")) == before:
            assert time.monotonic() < deadline, "no refusal on h1's worker logs"
            time.sleep(0.2)
        assert len(lines) == before + 1, lines[before:]
        assert f"refused run from tls://{peer}:" in lines[-1], lines[-1]
        assert f"(certificate 'harness farm {role}'): {reason}" in lines[-1], lines[-1]
    # what a peer worker needs, the data of a task's input, the agent's certificate still gets
    said = call_worker(lab, "h2", target, "agent", "get_data")
    assert said == {"answer": repr({"status": "OK", "data": {}})}, said
    # the driver's certificate gets no data either: the driver gathers through the scheduler
    said = call_worker(lab, "ctl", target, "driver", "get_data")
    assert "refused by the farm: 'get_data' on a worker needs the scheduler's or a peer " \
        "worker's (agent) certificate, not the driver's" in str(said.get("error")), said
    assert lab.workers() == lab.expected_workers()  # the farm goes on


def listening(lab: Lab, host: str) -> dict[int, set[tuple[str, int]]]:
    """pid -> the (address, port) its TCP sockets listen on, in ``host``'s namespace."""
    done = lab.net.run(host, ["ss", "-Hltnp"], timeout=30)
    assert done.returncode == 0, done.stderr
    found: dict[int, set[tuple[str, int]]] = {}
    for line in done.stdout.splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        for pid in re.findall(r"pid=(\d+)", line):
            found.setdefault(int(pid), set()).add((address.strip("[]"), int(port)))
    return found


def worker_pids(lab: Lab, host: str) -> set[int]:
    """The pids the agent of ``host`` started its workers under (its --json events)."""
    events = [json.loads(line) for line in
              (lab.root / f"agent-{host}.jsonl").read_text().splitlines() if line.strip()]
    return {int(e["pid"]) for e in events if e.get("event") == "started"}


def test_the_http_routes_of_the_scheduler_and_the_workers_listen_on_127_0_0_1_only(
        lab: Lab) -> None:
    loopback = {"127.0.0.1", "::1"}
    scheduler_port = int(lab.scheduler.rpartition(":")[2])
    in_ctl = listening(lab, "ctl")
    assert lab.scheduler_pid in in_ctl, in_ctl
    farm_facing = {a for a in in_ctl[lab.scheduler_pid] if a[0] not in loopback}
    assert farm_facing == {(lab.net.address("ctl"), scheduler_port)}, in_ctl[lab.scheduler_pid]
    assert len(in_ctl[lab.scheduler_pid]) > 1  # Dask's HTTP routes are there, on 127.0.0.1
    addresses = lab.client("ctl", lab.tls, "driver")["addresses"]
    for host, serials in lab.phones.items():
        in_host = listening(lab, host)
        pids = worker_pids(lab, host) & set(in_host)
        assert len(pids) == len(serials), (pids, in_host)
        farm_facing = {a for pid in pids for a in in_host[pid] if a[0] not in loopback}
        expected = {(lab.net.address(host), int(str(addresses[f"{s}@{host}"]).rpartition(":")[2]))
                    for s in serials}
        assert farm_facing == expected, in_host


def test_the_artifact_service_serves_only_the_agents_certificate(lab: Lab, tmp_path: Path) -> None:
    blob = tmp_path / "model.gguf"
    blob.write_bytes(os.urandom(4096))
    sha = hashlib.sha256(blob.read_bytes()).hexdigest()
    out, err = tmp_path / "service.json", tmp_path / "service.err"
    service = lab.net.popen("ctl", [sys.executable, "-c", ARTIFACTS, lab.net.address("ctl"),
                                    str(lab.tls), str(blob), sha], log=out, errlog=err)
    try:
        wait_until(lambda: bool(out.read_text().strip()), "the artifact service to start", 60)
        started = json.loads(out.read_text())
        url = f"{started['url']}/sha256/{sha}"
        for role in ("driver", "scheduler"):  # the run's token, a certificate of the farm
            done = lab.net.run("h1", [sys.executable, "-c", FETCH, url, str(lab.tls), role,
                                      started["token"]], timeout=60)
            said = json.loads(done.stdout.strip().splitlines()[-1])
            assert said == {"status": 403, "reason": "artifacts are for the farm's workers (the "
                            f"agent's certificate), not the {role}'s"}, said
        done = lab.net.run("h1", [sys.executable, "-c", FETCH, url, str(lab.tls), "agent",
                                  started["token"]], timeout=60)
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": 200,
                                                                    "bytes": 4096}, done
    finally:
        service.terminate()
        service.wait(timeout=30)
    lines = [line for line in err.read_text().splitlines() if "refused" in line]
    h1 = lab.net.address("h1")
    assert len(lines) == 2 and all(f"refused {h1}:" in line for line in lines), lines
    assert "certificate 'harness farm driver'" in lines[0], lines
    assert "certificate 'harness farm scheduler'" in lines[1], lines


def test_an_agent_whose_link_goes_down_mid_run_comes_back_and_nothing_is_lost_or_doubled(
    lab: Lab, host_build: Build, tiny_ladder: dict[str, Path],
    fault_row: Callable[[str], Any],
) -> None:
    row = fault_row(f"farm: an agent host's network down {WORKER_TTL_S + 10} s mid-run "
                    "(past the worker TTL)")

    def outage(results: Path) -> None:
        wait_until(lambda: bool(set(stored(results)["device_serial"]) & set(lab.phones["h1"])),
                   "a job of h1 to be stored", 600)
        lab.net.link_down("h1")
        row.injected = True
        time.sleep(WORKER_TTL_S + 10)  # the fault's length: the scheduler drops h1's workers
        lab.net.link_up("h1")

    summary, results = run_driver(lab, "link-down", host_build, outage)
    lost, duplicated, trials = audit_run(summary, results, lab)
    row.trials, row.lost, row.duplicated = len(trials), lost, duplicated
    assert (lost, duplicated) == (0, 0), json.dumps(summary)
    assert trials["trial_id"].is_unique
    lab.wait_for_workers(lab.expected_workers())  # h1's phones have workers again


def test_an_agent_host_killed_outright_frees_its_phones_after_the_lease_ttl(
    lab: Lab, host_build: Build, tiny_ladder: dict[str, Path],
    fault_row: Callable[[str], Any],
) -> None:
    row = fault_row("farm: an agent host killed outright mid-run; its phones moved to the "
                    "other host")
    gone = list(lab.phones["h2"])
    killed_at: list[float] = []

    def kill(results: Path) -> None:
        wait_until(lambda: bool(set(stored(results)["device_serial"]) & set(gone)),
                   "a job of h2 to be stored", 600)
        # cut the power while h2 is inside a job (its lease on a phone): between two jobs (short
        # now that a phone's set-up is kept) no lease would be left for h1 to wait out
        wait_until(lambda: "h2" in lease_hosts(lab), "h2 to hold a phone's lease", 600)
        lab.net.link_down("h2")  # the power cut: no FIN, no goodbye
        lab.net.kill_host("h2")
        killed_at.append(time.time())
        row.injected = True
        lab.agents.pop("h2", None)
        for serial in gone:  # the phones are plugged into h1's USB hub
            lab.net.unplug(serial)
            lab.net.connect_phone(serial, "h1")

    summary, results = run_driver(lab, "host-killed", host_build, kill)
    lost, duplicated, trials = audit_run(summary, results, lab)
    row.trials, row.lost, row.duplicated = len(trials), lost, duplicated
    assert (lost, duplicated) == (0, 0), json.dumps(summary)
    moved = [job for job in summary["jobs"] if job["serial"] in gone
             and job["worker"] == f"{job['serial']}@h1"]
    assert moved, summary["jobs"]  # the dead host's queued jobs ran on h1
    # the job h2 was running when it died held the phone's lease: h1 waited for it to expire
    waited = [job for job in moved if job["lease_s"] > 5]
    assert waited, [(j["key"], j["lease_s"]) for j in moved]
    assert all(job["lease_s"] < LEASE_TTL_S + 20 for job in moved)
    lab.phones["h1"] += gone
    lab.phones["h2"] = []
