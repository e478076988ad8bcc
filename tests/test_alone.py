"""An ``alone`` test runs while the other test process runs none (tests/alone.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).with_name("data") / "alone"


def test_an_alone_test_overlaps_no_other_and_the_others_overlap(tmp_path: Path) -> None:
    for name in ("pair_a.py", "pair_b.py"):  # named test_* once copied: collected there only
        shutil.copy(DATA / name, tmp_path / f"test_{name}")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["alone"]\n')
    log = tmp_path / "log"
    env = {**os.environ, "ALONE_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(tmp_path)])}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadfile", "--basetemp", str(tmp_path / "bt"), "-o", "addopts=",
         str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        name, _, moment = line.split()
        spans.setdefault(name, []).append(float(moment))
    assert set(spans) == {"alone", "a", "b1", "b2"}

    def overlap(x: str, y: str) -> bool:
        return spans[x][0] < spans[y][1] and spans[y][0] < spans[x][1]

    assert not any(overlap("alone", other) for other in ("a", "b1", "b2")), spans
    # the shared tests of the two files ran side by side (one of b's beside a)
    assert overlap("a", "b1") or overlap("a", "b2"), spans
