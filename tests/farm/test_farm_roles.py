"""Certificates carry their role, the scheduler's preload checks it per request, and an agent's
workers bind the address on the route to the scheduler. Fast: no scheduler is started here (the
namespace test, test_farm_netns.py, runs the real one across hosts)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from farmcerts import pre_role_certificate

from harness.cli import main
from harness.errors import ConfigError
from harness.farm import FarmError, roles
from harness.farm.agent import AgentConfig, listen_address, worker_argv
from harness.farm.route import address_towards, route_address, scheduler_endpoint
from harness.farm.security import (
    ROLES,
    FarmTLS,
    certificate_role,
    init_farm,
    peer_name,
    peer_role,
)

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "matrices" / "smoke.yaml")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def farm_tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("roles") / "tls"
    init_farm(folder)
    return folder


def peercert(role: str | None, name: str = "harness farm agent") -> dict[str, Any]:
    """A certificate as ``ssl.SSLSocket.getpeercert()`` decodes it."""
    cert: dict[str, Any] = {"subject": ((("organizationName", "harness farm"),),
                                        (("commonName", name),))}
    if role is not None:
        cert["subjectAltName"] = (("URI", f"harness-role:{role}"),)
    return cert


# -- the certificates -----------------------------------------------------------------------

def test_each_certificate_carries_its_role(farm_tls: Path) -> None:
    for role in ROLES:
        assert certificate_role(farm_tls / f"{role}.pem") == role
        assert FarmTLS(farm_tls, role).check().role == role
        text = subprocess.run(["openssl", "x509", "-in", str(farm_tls / f"{role}.pem"),
                               "-noout", "-ext", "subjectAltName"],
                              capture_output=True, text=True, timeout=60).stdout
        assert f"URI:harness-role:{role}" in text
    assert certificate_role(farm_tls / "ca.pem") is None
    assert peer_role(peercert("driver")) == "driver"
    assert peer_role(peercert(None)) is None
    assert peer_role(None) is None
    assert peer_role({"subjectAltName": (("URI", "harness-role:agent"),
                                         ("URI", "harness-role:driver"))}) is None  # two
    assert peer_role({"subjectAltName": (("URI", "harness-role:admin"),)}) is None  # unknown
    assert peer_role({"subjectAltName": (("DNS", "harness-role:agent"),)}) is None
    assert peer_name(peercert("agent")) == "harness farm agent" and peer_name({}) == "?"


def test_a_command_with_another_roles_or_a_pre_role_certificate_stops_with_one_line(
    farm_tls: Path, tmp_path: Path,
) -> None:
    misplaced = tmp_path / "misplaced"
    shutil.copytree(farm_tls, misplaced)
    for suffix in ("pem", "key"):  # the agent's files copied where the driver's belong
        shutil.copy(farm_tls / f"agent.{suffix}", misplaced / f"driver.{suffix}")
    code, output = invoke("run", SMOKE, "--backend", "dask", "--scheduler", "tls://127.0.0.1:9",
                          "--tls", str(misplaced))
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert "driver.pem is the farm's agent certificate, not the driver's" in output

    old = tmp_path / "old"
    shutil.copytree(farm_tls, old)
    pre_role_certificate(old, "scheduler")
    code, output = invoke("farm", "scheduler", "--dry-run", "--tls", str(old))
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert "scheduler.pem carries no farm role" in output
    assert "harness farm init DIR --reissue" in output


def test_reissue_gives_old_certificates_their_role_with_the_same_ca_and_keys(
    farm_tls: Path, tmp_path: Path,
) -> None:
    folder = tmp_path / "tls"
    shutil.copytree(farm_tls, folder)
    for role in ROLES:
        pre_role_certificate(folder, role)
    kept = {name: (folder / name).read_bytes()
            for name in ("ca.pem", "ca.key", *(f"{role}.key" for role in ROLES))}
    code, output = invoke("farm", "init", str(folder), "--reissue", "--json")
    assert code == 0, output
    assert '"files": ["scheduler.pem", "agent.pem", "driver.pem"]' in output
    assert {name: (folder / name).read_bytes() for name in kept} == kept
    for role in ROLES:
        assert certificate_role(folder / f"{role}.pem") == role
        check = subprocess.run(["openssl", "verify", "-CAfile", str(folder / "ca.pem"),
                                str(folder / f"{role}.pem")],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
    assert not list(folder.glob(".*"))  # no part file left
    code, output = invoke("farm", "init", str(tmp_path / "none"), "--reissue")
    assert code == 2 and "holds no farm CA" in output and "Traceback" not in output


def test_the_tls_scheduler_checks_roles_with_harness_preload(farm_tls: Path) -> None:
    code, output = invoke("farm", "scheduler", "--dry-run", "--tls", str(farm_tls))
    assert code == 0, output
    assert f"--tls-key {farm_tls / 'scheduler.key'} --preload harness.farm.roles" in output
    code, output = invoke("farm", "scheduler", "--dry-run", "--insecure")
    assert "--preload" not in output


def test_a_tls_agents_workers_check_roles_with_harness_preload(farm_tls: Path) -> None:
    config = AgentConfig(scheduler="tls://10.0.0.1:8786", host="lab-2",
                         tls=FarmTLS(farm_tls, "agent"))
    argv = worker_argv(config, "emulator-5554")
    assert argv[argv.index("--preload") + 1] == "harness.farm.roles"
    assert argv[argv.index("--protocol") + 1] == "tls"


def test_the_schedulers_http_routes_bind_127_0_0_1_only() -> None:
    code, output = invoke("farm", "scheduler", "--dry-run", "--host", "10.0.0.2", "--insecure")
    assert code == 0, output
    assert "--no-dashboard --dashboard-address 127.0.0.1:0" in output  # Dask's default: all
    for given in ("8787", ":8787", "localhost:8787", "127.0.0.1:8787"):
        code, output = invoke("farm", "scheduler", "--dry-run", "--insecure",
                              "--dashboard-address", given)
        assert code == 0 and "--dashboard --dashboard-address 127.0.0.1:8787" in output, output
    for given in ("0.0.0.0:8787", "10.0.0.2:8787", "[::]:8787", "127.0.0.1:http"):
        code, output = invoke("farm", "scheduler", "--dry-run", "--insecure",
                              "--dashboard-address", given)
        assert code == 2 and len(output.strip().splitlines()) == 2, output  # + the insecure line
        assert f"--dashboard-address {given}: the dashboard binds 127.0.0.1 only" in output
        assert "Traceback" not in output


# -- the scheduler's check ------------------------------------------------------------------

@pytest.mark.parametrize(("op", "role", "allowed"), [
    ("register-client", "driver", True),
    ("register-client", "agent", False),
    ("register-client", "scheduler", False),
    ("register-client", None, False),
    ("register-worker", "agent", True),
    ("register-worker", "driver", False),
    ("register-worker", "scheduler", False),
    ("register-worker", None, False),
    ("heartbeat_worker", "agent", True),
    ("retire_workers", "agent", True),
    ("run_function", "agent", False),  # a client's request: code on every worker
    ("scatter", "agent", False),
    ("run_function", "driver", True),
    ("identity", "agent", True),
    ("identity", None, True),
])
def test_who_may_ask_what(op: str, role: str | None, allowed: bool) -> None:
    assert (roles.refusal(op, role) is None) == allowed


class Comm:
    """What the guard uses of a Dask comm."""

    def __init__(self, cert: dict[str, Any] | None) -> None:
        self.extra_info = {"peercert": cert} if cert is not None else {}
        self.peer_address = "tls://10.0.0.9:41234"
        self.written: list[Any] = []
        self.aborted = False

    async def write(self, msg: Any, serializers: Any = None) -> int:
        self.written.append(msg)
        return 1

    def abort(self) -> None:
        self.aborted = True


@pytest.fixture
def scheduler_log() -> Iterator[list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.levelname} {record.getMessage()}")

    handler = Keep(level=logging.INFO)
    roles.log.addHandler(handler)
    level = roles.log.level
    roles.log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        roles.log.removeHandler(handler)
        roles.log.setLevel(level)


def test_a_refused_request_is_one_line_an_answer_the_asker_understands_and_a_closed_comm(
    scheduler_log: list[str],
) -> None:
    from distributed.core import Status

    called: list[Any] = []

    def add_client(comm: Any, client: str, versions: Any) -> None:
        called.append(client)

    comm = Comm(peercert("agent"))
    guarded = roles.guard("register-client", add_client)
    result = asyncio.run(guarded(comm, client="c1", versions={}))
    assert result == Status.dont_reply and called == [] and comm.aborted
    reason = "a client (driver) needs the driver's certificate, not the agent's"
    assert comm.written == [[{"op": "stream-start", "error": f"refused by the farm: {reason}"}]]
    assert scheduler_log == [f"WARNING harness farm: refused register-client from "
                             f"tls://10.0.0.9:41234 (certificate 'harness farm agent'): {reason}"]

    comm = Comm(peercert("driver", "harness farm driver"))
    guarded = roles.guard("register-worker", lambda comm, **msg: called.append(msg))
    asyncio.run(guarded(comm, address="tls://10.0.0.9:1", name="w"))
    assert called == [] and comm.aborted
    answer = comm.written[0]
    assert answer["status"] == "error" and "time" in answer  # what distributed.Worker reads
    assert "not the driver's" in answer["message"] and len(scheduler_log) == 2

    comm = Comm(None)  # no certificate at all (a plaintext comm): no role
    asyncio.run(roles.guard("gather", lambda keys: keys)(comm, keys=["k"]))
    assert comm.aborted and "carries no farm role" in scheduler_log[-1]


def test_an_allowed_request_reaches_its_handler_as_dask_would_call_it() -> None:
    seen: list[Any] = []

    def no_comm(keys: list[str], serializers: Any = None) -> str:
        seen.append((keys, serializers))
        return "ok"

    async def with_comm(comm: Any, n: int) -> int:
        seen.append(comm)
        return n + 1

    comm = Comm(peercert("driver"))
    assert asyncio.run(roles.guard("gather", no_comm)(comm, keys=["k"], serializers=["pickle"])) \
        == "ok"
    assert asyncio.run(roles.guard("x", with_comm)(comm, n=1)) == 2
    assert seen == [(["k"], ["pickle"]), comm] and not comm.aborted and comm.written == []


def test_the_preload_guards_every_handler_also_those_added_later(
    scheduler_log: list[str],
) -> None:
    class Scheduler:
        def __init__(self) -> None:
            self.handlers: dict[str, Any] = {"identity": lambda: "me"}

    scheduler = Scheduler()
    roles.dask_setup(scheduler)
    scheduler.handlers["run_function"] = lambda comm, function: function
    comm = Comm(peercert("agent"))
    assert asyncio.run(scheduler.handlers["identity"](comm)) == "me"
    asyncio.run(scheduler.handlers["run_function"](comm, function="f"))
    assert comm.aborted and "refused run_function" in scheduler_log[-1]
    assert scheduler.handlers["identity"] is scheduler.handlers["identity"]  # made once


# -- a worker's check ------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "role", "allowed"), [
    ("get_data", "agent", True),  # a peer worker fetching a task's input
    ("get_data", "scheduler", True),  # the scheduler gathering a result for the driver
    ("get_data", "driver", False),  # the driver goes through the scheduler
    ("get_data", None, False),
    ("run", "scheduler", True),  # Client.run reaches the workers through the scheduler
    ("run", "agent", False),  # code on another host's worker
    ("run", "driver", False),
    ("run_coroutine", "agent", False),
    ("upload_file", "agent", False),
    ("plugin-add", "agent", False),
    ("update_data", "agent", False),
    ("connection_stream", "agent", False),  # a stream of task messages (compute-task, ...)
    ("terminate", "driver", False),
    ("identity", "agent", False),
    ("identity", "scheduler", True),
])
def test_what_a_worker_takes_from_whom(op: str, role: str | None, allowed: bool) -> None:
    assert (roles.worker_refusal(op, role) is None) == allowed


def test_the_preload_on_a_worker_takes_data_requests_from_peers_and_the_rest_from_the_scheduler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from distributed import Worker

    caplog.set_level(logging.INFO, "distributed.worker")
    worker = Worker.__new__(Worker)  # the preload needs only its type and its handlers
    ran: list[str] = []
    worker.handlers = {"get_data": lambda comm, keys: {"status": "OK", "data": {}},
                       "run": lambda comm, function: ran.append(function)}
    roles.dask_setup(worker)
    peer = Comm(peercert("agent"))
    assert asyncio.run(worker.handlers["get_data"](peer, keys=[])) == {"status": "OK",
                                                                      "data": {}}
    asyncio.run(worker.handlers["run"](peer, function="f"))
    assert ran == [] and peer.aborted
    reason = "'run' on a worker needs the scheduler's certificate, not the agent's"
    (answer,) = peer.written  # what distributed's rpc turns into the exception it raises
    assert answer["status"] == "error"
    assert answer["exception_text"] == repr(PermissionError(f"refused by the farm: {reason}"))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == [f"harness farm: refused run from tls://10.0.0.9:41234 (certificate "
                     f"'harness farm agent'): {reason}"]
    scheduler = Comm(peercert("scheduler", "harness farm scheduler"))
    asyncio.run(worker.handlers["run"](scheduler, function="f"))
    assert ran == ["f"] and not scheduler.aborted


# -- the address the workers bind -------------------------------------------------------------

def test_the_workers_bind_the_address_on_the_route_to_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert scheduler_endpoint("tls://10.0.0.2:8790") == ("10.0.0.2", 8790)
    assert scheduler_endpoint("lab1") == ("lab1", 8786)
    assert scheduler_endpoint("tls://[fd00::2]:8786") == ("fd00::2", 8786)
    with pytest.raises(ConfigError, match="the port is not a number"):
        scheduler_endpoint("tls://lab1:http")
    assert address_towards("127.0.0.1", 8786) == "127.0.0.1"
    assert listen_address("tls://127.0.0.1:8786", None) == ("127.0.0.1", "route to 127.0.0.1")
    assert listen_address("tls://10.0.0.2:8786", "10.0.0.12") == ("10.0.0.12", "--listen-host")

    def no_route(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_route)
    with pytest.raises(FarmError) as error:
        route_address("tls://lab9:8786", "pass --listen-host ADDR")
    assert str(error.value) == ("cannot tell which address of this machine reaches the "
                                "scheduler at lab9 (Name or service not known); "
                                "pass --listen-host ADDR")
