"""`harness bisect` bad input: one line, exit 2, before anything is built or run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from analysis.factory import cell, trial, write
from harness.artifacts import gitbuild
from harness.cli import main
from harness.errors import ConfigError
from harness.run.bisect import cell_from_trials, matrix_document
from harness.store import read_table


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path, llama: bool = True) -> tuple[str, str]:
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "test")
    if llama:
        (path / "ggml").mkdir()
        (path / "ggml" / "x.c").write_text("int x;\n")
        (path / "tools" / "llama-bench").mkdir(parents=True)
        (path / "tools" / "llama-bench" / "llama-bench.cpp").write_text("int main(){}\n")
    (path / "README").write_text("one\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    first = git(path, "rev-parse", "HEAD")
    (path / "README").write_text("two\n")
    git(path, "commit", "-qam", "second")
    return first, git(path, "rev-parse", "HEAD")


def bisect(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["bisect", *args])
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    results = tmp_path / "results"
    c = cell()
    write(results, [trial(c)])
    return results, c.cell_id


def test_unknown_revisions_not_llama_and_unknown_cells_are_one_line(
    tmp_path: Path, store: tuple[Path, str]
) -> None:
    results, cell_id = store
    repo = tmp_path / "llama.cpp"
    good, bad = make_repo(repo)
    base = ["--source", str(repo), "--cell", cell_id, "--results", str(results),
            "--devices", "sim:1"]
    for flag, args in (("--good", ["--good", "nope", "--bad", bad]),
                       ("--bad", ["--good", good, "--bad", "v9.9"])):
        code, out = bisect(*base, *args)
        assert code == 2 and f"{flag} " in out and "unknown revision" in out, out
        assert len(out.strip().splitlines()) == 1
    code, out = bisect(*base, "--good", bad, "--bad", good)
    assert code == 2 and "not an ancestor" in out, out
    code, out = bisect("--source", str(repo), "--good", good, "--bad", bad, "--cell",
                       "0123456789abcdef", "--results", str(results), "--devices", "sim:1")
    assert code == 2 and "no such cell" in out, out
    code, out = bisect(*base, "--good", good, "--bad", bad, "--abi", "arm64-v8a")
    assert code == 2 and "host ABI only" in out, out

    other = tmp_path / "other"
    good, bad = make_repo(other, llama=False)
    code, out = bisect("--source", str(other), "--good", good, "--bad", bad, "--cell", cell_id,
                       "--results", str(results), "--devices", "sim:1")
    assert code == 2 and "not a llama.cpp checkout" in out, out
    plain = tmp_path / "plain"
    plain.mkdir()
    code, out = bisect("--source", str(plain), "--good", "a", "--bad", "b", "--cell", cell_id,
                       "--results", str(results), "--devices", "sim:1")
    assert code == 2 and "not a git checkout" in out, out


def test_the_stored_cell_is_rebuilt_and_put_in_a_two_build_matrix(
    store: tuple[Path, str]
) -> None:
    results, cell_id = store
    rebuilt, run_id = cell_from_trials(read_table(results, "trials"), cell_id, results)
    assert rebuilt.cell_id == cell_id and run_id == "run1"
    origin = {"models": {"tiny": {"ladder": "tiny"}, "other": {"ladder": "bench"}},
              "timeout": {"trial_s": 60}}
    doc = matrix_document(rebuilt, origin, ["g", "c"], 5)
    assert doc["axes"]["build"] == ["g", "c"] and doc["repetitions"] == 5
    assert doc["models"] == {"tiny": {"ladder": "tiny"}} and doc["timeout"] == {"trial_s": 60}
    json.dumps(doc)  # plain data, ready for YAML


def test_help_has_an_example_and_says_host_only() -> None:
    result = CliRunner().invoke(main, ["bisect", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    assert "host ABI only" in result.output and "GGML_NATIVE=OFF" in result.output


def test_the_loop_logs_every_step_and_a_killed_bisect_resumes(
    tmp_path: Path, store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver with fake builds and measurements: log, skip, resume, report."""
    from contextlib import nullcontext

    from harness.artifacts import gitbuild
    from harness.run import bisect as driver
    from harness.run.store_io import write_run_meta

    results, cell_id = store
    origin = tmp_path / "origin.yaml"
    origin.write_text("models:\n  tiny: {ladder: tiny}\n")
    write_run_meta(results, "run1", {"run_id": "run1", "matrix": str(origin)})
    repo = tmp_path / "llama.cpp"
    make_repo(repo)
    for i in range(14):
        (repo / "README").write_text(f"{i}\n")
        git(repo, "commit", "-qam", f"change {i}")
    shas = git(repo, "rev-list", "--reverse", "HEAD").splitlines()
    good, listed = shas[0], shas[1:]  # 15 commits; the 10th of them is slow, the 7th broken
    slow, broken = listed[9], listed[7]
    built: list[str] = []

    def fake_build(self: gitbuild.Workspace, commit: str,
                   progress: object = None) -> gitbuild.BuildResult:
        built.append(commit)
        ok = commit != broken
        return gitbuild.BuildResult(commit, object() if ok else None,  # type: ignore[arg-type]
                                    1.0, cached=False, error=None if ok else "#error")

    calls = {"n": 0, "kill_at": 3}

    def fake_measure(self: driver.Bisector, devices: list[object], commit: str) -> str:
        calls["n"] += 1
        if calls["n"] == calls["kill_at"]:
            raise KeyboardInterrupt  # killed mid-measurement
        return f"run-{calls['n']}"

    def fake_judge(self: driver.Bisector, commit: str, run_ids: list[str]) -> dict[str, object]:
        verdict = "regression" if listed.index(commit) >= 9 else "same"
        return {"verdict": verdict, "outcome": driver.outcome_of(verdict), "ratio": 0.5,
                "ci_low": 0.45, "ci_high": 0.55, "n_good": 5, "n_candidate": 5}

    monkeypatch.setattr(gitbuild.Workspace, "build", fake_build)
    monkeypatch.setattr(gitbuild.Workspace, "cached",
                        lambda self, commit: object() if commit in built else None)
    monkeypatch.setattr(gitbuild.Workspace, "remove", lambda self: None)
    monkeypatch.setattr(driver.Bisector, "_measure", fake_measure)
    monkeypatch.setattr(driver.Bisector, "_judge", fake_judge)
    request = driver.BisectRequest(source=repo, good=good, bad="HEAD", cell_id=cell_id,
                                   results=results)
    with pytest.raises(KeyboardInterrupt):
        driver.Bisector(request).run(lambda: nullcontext(["phone"]))
    before = driver.read_log(driver.Bisector(request).log)
    assert [r["event"] for r in before].count("measure") == 2
    calls["kill_at"] = 0
    report = driver.Bisector(request).run(lambda: nullcontext(["phone"]))
    assert report.first_bad == slow and report.candidates == (slow,)
    assert report.skipped == (broken,)
    records = driver.read_log(report.log)
    assert records[:len(before)] == before
    commits_built = [r["commit"] for r in records if r["event"] == "build"]
    assert len(commits_built) == len(set(commits_built)) == len(built)
    assert commits_built[:2] == [good, listed[-1]]
    assert len(commits_built) <= math.ceil(math.log2(len(listed))) + 3  # + the broken one
    # a finished bisect only reports again
    again = driver.Bisector(request).run(lambda: nullcontext([]))
    assert again.first_bad == slow and len(driver.read_log(report.log)) == len(records)


def test_a_git_lock_left_by_a_killed_bisect_does_not_stop_the_next_checkout(
        tmp_path: Path) -> None:
    """CI once killed a bisect during its `git checkout`: the index.lock it left made the resumed
    bisect fail with git's "remove the file manually". Under the workspace's own lock no git of
    ours is alive, so the stale lock is ours to drop."""
    first, second = make_repo(tmp_path / "repo")
    space = gitbuild.Workspace(tmp_path / "repo", "b1", cache=tmp_path / "cache")
    with space.locked():
        space.checkout(first)
    git_dir = Path(git(space.tree, "rev-parse", "--absolute-git-dir"))
    (git_dir / "index.lock").write_text("")
    with space.locked():
        space.checkout(second)
    assert (space.tree / "README").read_text() == "two\n"
    assert not (git_dir / "index.lock").exists()


def test_a_second_process_in_the_same_bisect_folder_is_refused_by_pid(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    space = gitbuild.Workspace(tmp_path / "repo", "b1", cache=tmp_path / "cache")
    space.root.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "h = open(sys.argv[1], 'a+'); fcntl.flock(h, fcntl.LOCK_EX)\n"
         "h.write(str(os.getpid())); h.flush(); print('held', flush=True); time.sleep(60)",
         str(space.root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"in use by pid {holder.pid}"), space.locked():
            pass
    finally:
        holder.kill()
        holder.wait()
    with space.locked():  # the kernel dropped the dead holder's lock
        pass


def test_a_gpu_cell_is_rebuilt_and_bisected_on_its_device(tmp_path: Path) -> None:
    """Every knob of the registry comes back from the store and goes into the bisect's matrix:
    a cell offloaded to Vulkan0 with its own load mode is bisected there, not on the CPU."""
    from harness.matrix import expand, load_matrix

    results = tmp_path / "results"
    gpu = replace(cell(), compute_device="Vulkan0", n_gpu_layers=-1, load_mode="dio",
                  mmap=False, type_v="q8_0")
    write(results, [trial(gpu, load_mode=gpu.resolved_load_mode)])  # as a run stores it
    rebuilt, _ = cell_from_trials(read_table(results, "trials"), gpu.cell_id, results)
    assert rebuilt.cell_id == gpu.cell_id
    doc = matrix_document(rebuilt, {"models": {"tiny": {"ladder": "tiny"}}}, ["g"], 3)
    axes = doc["axes"]
    assert axes["compute_device"] == ["Vulkan0"] and axes["n_gpu_layers"] == ["all"]
    assert axes["load_mode"] == ["dio"] and axes["kv"] == [{"type_k": "f16", "type_v": "q8_0"}]
    path = tmp_path / "bisect.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    (again,) = expand(load_matrix(path))
    assert again.config_id == gpu.config_id
