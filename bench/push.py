"""Item 2: push throughput of the harness (adbutils sync, ``Device.push``) against ``adb push``.

Same ~100 MB file of random bytes, same virtual phone, same adb server, alternating which goes
first in each pair. Each push goes to a fresh name and is deleted after, so neither is ever a
no-op. Throughput is bytes over the wall time of the call (the adb client's process start is
part of its time, which favours the harness by a few milliseconds).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

from bench.common import Figure, Lab, iqr_text, summarize

SIZE = 100 * 2**20
REMOTE = "/data/local/tmp/bench-push"


def pair_order(index: int) -> tuple[str, str]:
    """Alternate which method goes first, so warming caches favours neither (pure, tested)."""
    return ("harness", "adb") if index % 2 == 0 else ("adb", "harness")


def make_blob(path: Path, size: int = SIZE) -> Path:
    """Random bytes: a compressible file would flatter any transport that compresses."""
    if not path.is_file() or path.stat().st_size != size:
        with path.open("wb") as out:
            for _ in range(size // 2**20):
                out.write(os.urandom(2**20))
    return path


def _push_once(lab: Lab, device: Any, method: str, blob: Path, remote: str) -> float:
    start = time.perf_counter()
    if method == "harness":
        device.push(blob, remote)
    else:
        done = lab.adb.adb("-s", device.serial, "push", str(blob), remote, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"adb push failed: {done.stderr.strip()[-500:]}")
    seconds = time.perf_counter() - start
    size = device.shell(f"stat -c %s {shlex.quote(remote)}").stdout.strip()
    if size != str(blob.stat().st_size):
        raise RuntimeError(f"{method} push left {size!r} bytes, expected {blob.stat().st_size}")
    device.shell(f"rm -f {shlex.quote(remote)}")
    return seconds


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    pairs = 5 if quick else 10
    device = lab.devices(1)[0]
    blob = make_blob(lab.work / "push-100MiB.bin")
    rows: list[dict[str, Any]] = []
    for index in range(pairs):
        seconds: dict[str, float] = {}
        for method in pair_order(index):
            seconds[method] = _push_once(lab, device, method, blob, f"{REMOTE}-{method}")
        rows.append({"pair": index, "order": list(pair_order(index)),
                     "harness_s": seconds["harness"], "adb_s": seconds["adb"],
                     "harness_mb_s": SIZE / seconds["harness"] / 1e6,
                     "adb_mb_s": SIZE / seconds["adb"] / 1e6})
    ratio = [r["adb_s"] / r["harness_s"] for r in rows]
    stats = summarize(ratio)
    harness_mb = summarize([r["harness_mb_s"] for r in rows])["median"]
    adb_mb = summarize([r["adb_mb_s"] for r in rows])["median"]
    figure = Figure("2 push: harness / adb push throughput", stats["median"], "ratio",
                    iqr_text(ratio), ">= 0.9", stats["median"] >= 0.9,
                    f"{harness_mb:.0f} vs {adb_mb:.0f} MB/s on {SIZE / 2**20:.0f} MiB")
    return [figure], {"pairs": rows, "bytes": SIZE, "ratio": stats}
