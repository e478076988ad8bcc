"""Item 2: push throughput of the harness (``Device.push``, its own sync SEND) against ``adb push``.

Same ~100 MB file of random bytes, same virtual phone, same adb server, alternating which goes
first in each pair. Each push goes to a fresh name and is deleted after, so neither is ever a
no-op. Throughput is bytes over the wall time of the call. The adb client's fixed cost (process
start, three server connections, a STA2 of the target: about 4.5 ms for an empty file against
the harness's 1 ms) is part of its time, which favours the harness by about 1.5 % at 100 MiB.
The log prints every pair's ratio, their median and range.
"""

from __future__ import annotations

import os
import shlex
import statistics
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


def ratio_text(ratios: list[float]) -> str:
    """'median 0.985, range 0.962-1.004 over 5 pairs: 0.980 0.990 ...', for the log."""
    return (f"median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-"
            f"{max(ratios):.3f} over {len(ratios)} pairs: " + " ".join(f"{r:.3f}" for r in ratios))


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    # one push varies by +-25 % on a shared 2-core host; 5 pairs cannot tell 0.97 from 1.0
    pairs = 10 if quick else 20
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
                     "adb_mb_s": SIZE / seconds["adb"] / 1e6,
                     "ratio": seconds["adb"] / seconds["harness"]})
        row = rows[-1]
        print(f"[push] pair {index} ({pair_order(index)[0]} first): harness "
              f"{row['harness_s']:.3f} s ({row['harness_mb_s']:.0f} MB/s), adb "
              f"{row['adb_s']:.3f} s ({row['adb_mb_s']:.0f} MB/s), ratio {row['ratio']:.3f}",
              flush=True)
    ratio = [r["ratio"] for r in rows]
    stats = summarize(ratio)
    print(f"[push] harness / adb push: {ratio_text(ratio)}", flush=True)
    harness_mb = summarize([r["harness_mb_s"] for r in rows])["median"]
    adb_mb = summarize([r["adb_mb_s"] for r in rows])["median"]
    figure = Figure("2 push: harness / adb push throughput", stats["median"], "ratio",
                    iqr_text(ratio), ">= 0.9", stats["median"] >= 0.9,
                    f"{harness_mb:.0f} vs {adb_mb:.0f} MB/s on {SIZE / 2**20:.0f} MiB; "
                    f"range {stats['min']:.3f}-{stats['max']:.3f}")
    return [figure], {"pairs": rows, "bytes": SIZE, "ratio": stats}
