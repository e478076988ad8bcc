"""Extracting vendor/llama.cpp from a llama-cpp-python sdist (a small synthetic one here)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from harness.artifacts.llama_source import (
    LLAMA_CPP_PYTHON_VERSION,
    ensure_llama_source,
    read_source_info,
)
from harness.errors import BuildError

COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def _sdist(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extracts_only_the_vendored_tree_and_records_its_commit(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path / "s.tar.gz", {
        "pyproject.toml": "[project]",
        "vendor/llama.cpp/CMakeLists.txt": "project(llama.cpp)",
        "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp": "int main() {}",
        "vendor/llama.cpp/.git": "gitdir: ../../.git/modules/vendor/llama.cpp",
        ".git/modules/vendor/llama.cpp/HEAD": COMMIT + "\n",
    })
    tree = ensure_llama_source(sdist, tmp_path / "src")
    assert tree == tmp_path / "src" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    assert (tree / "tools" / "llama-bench" / "llama-bench.cpp").is_file()
    assert not (tree / ".git").exists() and not (tree / "pyproject.toml").exists()
    info = read_source_info(tree)
    assert info is not None and info.commit == COMMIT
    assert [p.name for p in (tmp_path / "src").iterdir()] == [tree.name]  # no temp left


def test_second_call_reuses_the_tree_without_reading_the_sdist(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path / "s.tar.gz", {"vendor/llama.cpp/CMakeLists.txt": "x"})
    tree = ensure_llama_source(sdist, tmp_path / "src")
    sdist.unlink()
    assert ensure_llama_source(sdist, tmp_path / "src") == tree


def test_an_archive_without_vendored_llama_cpp_is_a_build_error(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path / "s.tar.gz", {"README.md": "no vendor here"})
    with pytest.raises(BuildError, match=r"no vendor/llama\.cpp inside"):
        ensure_llama_source(sdist, tmp_path / "src")
    assert list((tmp_path / "src").iterdir()) == []
