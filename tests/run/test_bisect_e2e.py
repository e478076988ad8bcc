"""`harness bisect` end to end: a git history of the vendored llama.cpp with one slow commit and
one that does not compile, real incremental builds, a virtual phone, a killed and resumed run."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.artifacts.gitbuild import builds_dir
from harness.artifacts.llama_source import cache_root, ensure_llama_source
from harness.cli import main
from harness.run.bisect import bisect_id, log_path, read_log

pytestmark = pytest.mark.slow

N = 16  # commits between good and bad (bad included)
BROKEN = 7  # the first midpoint: does not compile (the next commit fixes it)
SLOW = 11  # the first slow commit
THREADING = "ggml/src/ggml-threading.cpp"
CPU_BACKEND = "ggml/src/ggml-cpu/ggml-cpu.cpp"
COMPUTE = "    return ggml_graph_compute(cgraph, &cplan);\n"
# Every graph computation (one per decoded token) takes twice as long: a busy wait as long as the
# computation itself, so the slowdown does not depend on the model's speed.
SLOW_COMPUTE = """    const int64_t bisect_t0 = ggml_time_us();
    const enum ggml_status bisect_status = ggml_graph_compute(cgraph, &cplan);
    const int64_t bisect_dt = ggml_time_us() - bisect_t0;
    while (ggml_time_us() - bisect_t0 < 2 * bisect_dt) {
    }
    return bisect_status;
"""
CELL_MATRIX = """name: bisect-cell
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q4_K_M]
  n_ctx: [1024]
  kv: [f16]
  threads: [1]
  affinity: [all]
  flash_attn: [auto]
  mmap: [true]
  n_batch: [256]
  n_ubatch: [128]
models:
  tiny: {ladder: tiny}
workload: {n_prompt: 16, n_gen: 512, n_depth: 0}   # the tiny model decodes ~8000 t/s
repetitions: 1
cooldown: {max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}
timeout: {trial_s: 120}
"""


# fixed dates: the same history has the same commits in every run, so the bisect's folders (named
# by them) are the same and ccache, where installed, finds what an earlier run compiled
DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **DATES}).stdout.strip()


def make_history(repo: Path) -> tuple[str, list[str]]:
    """The vendored llama.cpp as one commit (good), then N small commits (the last is bad)."""
    shutil.copytree(ensure_llama_source(), repo, symlinks=True,
                    ignore=shutil.ignore_patterns("*.gguf"))
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bisect@example.com")
    git(repo, "config", "user.name", "bisect test")
    git(repo, "add", "-A", "-f")
    git(repo, "commit", "-qm", "import the vendored llama.cpp")
    good = git(repo, "rev-parse", "HEAD")
    threading = (repo / THREADING).read_text()
    backend = (repo / CPU_BACKEND).read_text()
    assert COMPUTE in backend
    shas = []
    for i in range(N):
        if i == BROKEN:
            (repo / THREADING).write_text(threading + "#error this commit does not compile\n")
            message = f"step {i}: break the build"
        elif i == BROKEN + 1:
            (repo / THREADING).write_text(threading)
            message = f"step {i}: fix the build"
        elif i == SLOW:
            (repo / CPU_BACKEND).write_text(backend.replace(COMPUTE, SLOW_COMPUTE))
            message = f"step {i}: slow down every graph computation"
        else:
            notes = repo / "notes"
            notes.mkdir(exist_ok=True)
            (notes / f"step-{i}.txt").write_text(f"harmless change {i}\n")
            message = f"step {i}: add a note"
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", message)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return good, shas


def store_cell(tmp_path: Path, results: Path, host_build: Build) -> str:
    matrix = tmp_path / "cell.yaml"
    matrix.write_text(CELL_MATRIX)
    result = CliRunner().invoke(main, ["run", str(matrix), "--devices", "sim:1", "--results",
                                       str(results), "--builds", str(host_build.path.parent),
                                       "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    trials = store.read_table(results, "trials")
    assert (trials["outcome"] == "ok").all()
    (cell_id,) = set(trials["cell_id"])
    return str(cell_id)


def wait_for_measure(log: Path, process: subprocess.Popen[bytes], err: Path,
                     timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(r["event"] == "measure" for r in read_log(log)):
            return
        if process.poll() is not None:
            pytest.fail(f"bisect ended early ({process.returncode}): {err.read_text()[-2000:]}")
        time.sleep(2)
    pytest.fail("no measurement logged in time")


# real compiles of a llama.cpp history: a first full build (about 5 minutes on a fresh 2-core
# machine), then incremental ones; the first attempt alone may wait 900 s for a measurement
@pytest.mark.timeout(1800)
def test_bisect_names_the_slow_commit_skips_the_broken_one_and_resumes(
    sim_home: Path, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    started = time.monotonic()
    repo = tmp_path / "llama.cpp"
    good, shas = make_history(repo)
    results = tmp_path / "results"
    cell_id = store_cell(tmp_path, results, host_build)
    args = ["bisect", "--source", str(repo), "--good", good, "--bad", shas[-1], "--cell", cell_id,
            "--results", str(results), "--devices", "sim:1", "--reps", "10", "--noise", "0.30",
            "--json"]
    log = log_path(results, bisect_id(good, shas[-1], cell_id, "host"))
    err = tmp_path / "bisect.stderr"
    try:
        # first attempt: killed (with its compiler, if one runs) once a step is measured
        with open(err, "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-c", "from harness.cli import main; main()", *args],
                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:
            wait_for_measure(log, process, err, timeout_s=900)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        before = read_log(log)
        assert not any(r["event"] == "done" for r in before)

        # the same command again continues from the log
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        report: dict[str, Any] = json.loads(result.stdout)
        # a finished bisect prints its answer again, as text, without building or running
        text = CliRunner().invoke(main, args[:-1], catch_exceptions=False)
        assert text.exit_code == 0, text.output
        assert f"first bad commit: {shas[SLOW]} step {SLOW}:" in text.output
    finally:
        shutil.rmtree(cache_root() / "bisect" / "work" / bisect_id(good, shas[-1], cell_id,
                                                                    "host"), ignore_errors=True)
        for sha in [good, *shas]:
            shutil.rmtree(builds_dir() / sha, ignore_errors=True)

    records = read_log(log)
    assert records[:len(before)] == before  # the resumed run only appended
    assert [r["event"] for r in records].count("start") == 1
    assert report["first_bad"] == shas[SLOW], report
    assert report["exact"] and report["candidates"] == [shas[SLOW]]
    assert report["last_good"] == shas[SLOW - 1]
    assert shas[BROKEN] in report["skipped"]
    builds = [r for r in records if r["event"] == "build"]
    compiled = [b for b in builds if b["ok"] and not b["cached"]]
    assert [b["commit"] for b in builds if not b["ok"]] == [shas[BROKEN]]
    bound = math.ceil(math.log2(N)) + 2  # good + bad + one per halving
    assert len(compiled) <= bound, [b["commit"][:8] for b in builds]
    assert len({b["commit"] for b in builds}) == len(builds)  # nothing was built twice
    slow = [e for e in report["evidence"] if e["commit"] == shas[SLOW]][-1]  # after any retry
    assert slow["outcome"] == "bad" and slow["ratio"] < 0.8, slow
    incremental = [b["seconds"] for b in compiled[1:]]
    print(f"\nbisect: {len(compiled)} builds (first {compiled[0]['seconds']:.0f} s, "
          f"incremental {', '.join(f'{s:.0f}' for s in incremental)} s), "
          f"{len(report['evidence'])} measurements, {time.monotonic() - started:.0f} s in all")
