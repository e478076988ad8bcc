"""Git and cmake for ``harness bisect``: revisions, a work tree, incremental per-commit builds.

One git worktree and one cmake build folder per bisect (under ``$HARNESS_CACHE/bisect/work/
<bisect id>/``): each commit is checked out into the same worktree, so git rewrites only the
files that differ and cmake (re-run in place by ``cmake_build.compile_llama_cpp``) recompiles only
what they touch. Finished builds are kept per commit in ``$HARNESS_CACHE/bisect/builds/<commit>``
(a normal build folder with a manifest), so a second bisect over the same history builds nothing.

The cmake flags are host-release's (``cmake_defines("host", ...)`` with ``HOST_VARIANTS
["host-release"]``: ``GGML_NATIVE=OFF`` and the common defaults). Host ABI only for now.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.artifacts.builds import MANIFEST, Build, open_build, write_build
from harness.artifacts.cmake_build import (
    DEFAULT_TARGETS,
    HOST_VARIANTS,
    Progress,
    abi_name,
    cmake_defines,
    collect_products,
    compile_llama_cpp,
    cpu_features,
)
from harness.artifacts.llama_source import cache_root
from harness.errors import BuildError, ConfigError

#: What every llama.cpp checkout has (checked at the bad revision).
LLAMA_MARKERS = ("ggml", "tools/llama-bench")


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str


def _git(source: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which("git") is None:
        raise ConfigError("git is not installed; install it (apt-get install git) and retry")
    result = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True,
                            check=False)
    if check and result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise ConfigError(f"git {' '.join(args)} in {source}: {detail}")
    return result


def check_checkout(source: Path) -> None:
    """A one-line ConfigError unless ``source`` is a git checkout."""
    if not source.is_dir():
        raise ConfigError(f"--source {source}: no such folder")
    if _git(source, "rev-parse", "--git-dir", check=False).returncode != 0:
        raise ConfigError(f"--source {source}: not a git checkout")


def resolve(source: Path, rev: str, flag: str) -> str:
    """The full commit hash of ``rev``, or a one-line ConfigError naming the flag."""
    result = _git(source, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise ConfigError(f"{flag} {rev}: unknown revision in {source}")
    return result.stdout.strip()


def check_llama_cpp(source: Path, commit: str) -> None:
    """A one-line ConfigError unless the tree at ``commit`` has ggml/ and tools/llama-bench."""
    for marker in LLAMA_MARKERS:
        if _git(source, "cat-file", "-e", f"{commit}:{marker}", check=False).returncode != 0:
            raise ConfigError(f"--source {source}: not a llama.cpp checkout (no {marker}/ at "
                              f"{commit[:12]})")


def first_parent_commits(source: Path, good: str, bad: str) -> list[CommitInfo]:
    """The first-parent commits good..bad, oldest first (bad last)."""
    if _git(source, "merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
        raise ConfigError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}")
    out = _git(source, "rev-list", "--first-parent", "--reverse", "--format=%H %s",
               f"{good}..{bad}").stdout
    commits = []
    for line in out.splitlines():
        if line.startswith("commit "):
            continue
        sha, _, subject = line.partition(" ")
        commits.append(CommitInfo(sha, subject))
    if not commits:
        raise ConfigError(f"no commits between --good {good[:12]} and --bad {bad[:12]}")
    return commits


def subject(source: Path, commit: str) -> str:
    return _git(source, "log", "-1", "--format=%s", commit).stdout.strip()


def bisect_cache(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "bisect"


def builds_dir(cache: Path | None = None) -> Path:
    """The builds root holding one build per commit (named by its full hash)."""
    return bisect_cache(cache) / "builds"


def host_defines() -> dict[str, str]:
    """host-release's cmake defines (GGML_NATIVE=OFF)."""
    return cmake_defines("host", None, HOST_VARIANTS["host-release"])


@dataclass(frozen=True)
class BuildResult:
    commit: str
    build: Build | None  # None: it did not compile
    seconds: float
    cached: bool
    error: str | None = None


class Workspace:
    """One bisect's worktree and cmake folder (``$HARNESS_CACHE/bisect/work/<id>/``)."""

    def __init__(self, source: Path, bisect_id: str, cache: Path | None = None,
                 jobs: int | None = None) -> None:
        self.source = source.resolve()
        self.root = bisect_cache(cache) / "work" / bisect_id
        self.tree = self.root / "src"
        self.build_tree = self.root / "build"
        self.builds = builds_dir(cache)
        self.jobs = jobs

    def cached(self, commit: str) -> Build | None:
        if (self.builds / commit / MANIFEST).is_file():
            return open_build(self.builds, commit)
        return None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """This process alone in the worktree, or a ConfigError naming the one that is.

        The lock is an ``flock`` on ``<root>/lock``: the kernel drops it when its holder dies, so
        a killed bisect never blocks the next one, and any git lock file found while it is held
        was left by a process that is gone.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise ConfigError(f"bisect work folder {self.root} is in use by pid {holder}; "
                                  "wait for that bisect to end or stop it") from None
            handle.truncate(0)
            handle.write(str(os.getpid()))
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _clear_stale_git_locks(self) -> None:
        """Drop the worktree's ``index.lock``/``HEAD.lock`` a killed git left behind.

        Only called under :meth:`locked`, so no live git of ours can hold them.
        """
        found = _git(self.tree, "rev-parse", "--absolute-git-dir", check=False)
        if found.returncode != 0:
            return
        git_dir = Path(found.stdout.strip())
        for name in ("index.lock", "HEAD.lock"):
            (git_dir / name).unlink(missing_ok=True)

    def checkout(self, commit: str) -> None:
        """``commit`` into the worktree (made on first use); only changed files are rewritten."""
        if not (self.tree / ".git").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self.tree, ignore_errors=True)  # a `worktree add` killed half-way
            _git(self.source, "worktree", "prune", check=False)
            _git(self.source, "worktree", "add", "--detach", "--force", str(self.tree), commit)
            return
        self._clear_stale_git_locks()
        _git(self.tree, "checkout", "--detach", "--force", "--quiet", commit)
        _git(self.tree, "clean", "-fdq")

    def build(self, commit: str, progress: Progress | None = None) -> BuildResult:
        """The cached build of ``commit``, else check it out and compile it incrementally."""
        found = self.cached(commit)
        if found is not None:
            return BuildResult(commit, found, 0.0, cached=True)
        started = time.monotonic()
        with self.locked():
            self.checkout(commit)
            defines = host_defines()
            try:
                products = compile_llama_cpp(self.tree, self.build_tree, defines,
                                             DEFAULT_TARGETS, self.jobs, progress, nice=True)
                files = collect_products(products, DEFAULT_TARGETS)
            except BuildError as error:
                line = str(error).splitlines()[0]
                return BuildResult(commit, None, time.monotonic() - started, cached=False,
                                   error=line)
        made = write_build(
            self.builds, commit, files, engine="llama.cpp", abi=abi_name("host"), commit=commit,
            cmake_flags=[f"-D{k}={v}" for k, v in defines.items()], source=str(self.source),
            cpu=cpu_features("host", defines), replace=True,
        )
        return BuildResult(commit, made, time.monotonic() - started, cached=False)

    def remove(self) -> None:
        """Drop the worktree and the cmake folder (the per-commit builds stay cached)."""
        if (self.tree / ".git").exists():
            _git(self.source, "worktree", "remove", "--force", str(self.tree), check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        _git(self.source, "worktree", "prune", check=False)
