"""Fixtures shared by the run tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sim_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adb_server: object
             ) -> Iterator[Path]:
    """`--devices sim:N` keeps its phones under HARNESS_HOME, here a temporary one; the phones
    are stopped afterwards, also when the test fails."""
    home = tmp_path / "harness-home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    yield home
    from harness.virtual.control import stop_phones

    stop_phones(home=home / "sim")


@pytest.fixture
def shell_env(tmp_path: Path) -> Callable[[str], dict[str, str]]:
    """The environment with ``sh`` as the named shell first on PATH: the sampler's own
    ``sh -c`` then runs in that shell, as it runs in mksh on a phone."""
    def env(shell: str) -> dict[str, str]:
        folder = tmp_path / f"{shell}-bin"
        folder.mkdir(exist_ok=True)
        if not (folder / "sh").exists():
            (folder / "sh").symlink_to(shutil.which(shell) or shell)
        return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}

    return env
