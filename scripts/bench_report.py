"""Benchmark: build the HTML report from a farm-sized synthetic store (issue 9, item 5).

Writes a synthetic store of 1,000,000 trials and 10,000,000 samples (``--quick``: 100,000 and
1,000,000) in a temporary folder, runs ``harness report`` on it in a child process and measures
its wall time and peak resident memory (``getrusage`` of the child), then prints both against
the targets (30 s, 4 GiB) and writes ``bench/results/report.json``. The child's ``--json`` output
adds per-stage timings, including the build comparison (the "compare query").

Usage: .venv/bin/python scripts/bench_report.py [--quick] [--store DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from harness.testing.synthstore import SynthSpec, write_synthetic_store

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 30.0
TARGET_BYTES = 4 * (1 << 30)
QUANTS = ("Q2_K", "Q4_0", "Q4_K_M", "Q6_K", "Q8_0")
# 10 devices × 40 configs × 5 reps = 2,000 trials a night, one build a night, 10 samples a trial
FULL = SynthSpec(devices=10, quants=QUANTS, n_ctx=(512, 1024, 2048, 4096), reps=5, nights=500,
                 samples_per_trial=10)
QUICK = SynthSpec(devices=10, quants=QUANTS, n_ctx=(512, 1024, 2048, 4096), reps=5, nights=50,
                  samples_per_trial=10)
REPORT_CMD = ("import sys; from harness.cli.report import report; "
              "sys.exit(report.main(standalone_mode=True))")


def run_report(store: Path, output: Path) -> dict[str, object]:
    """``harness report --json`` in a child; wall time and the child's peak RSS."""
    cmd = [sys.executable, "-c", REPORT_CMD, "--results", str(store), "-o", str(output), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib = after.ru_maxrss
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"harness report failed ({done.returncode}):\n{done.stderr[-3000:]}")
    if peak_kib <= before.ru_maxrss:
        print("warning: peak RSS not above an earlier child's; figure may be an upper bound")
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "peak_rss_bytes": peak_kib * 1024,
            "report": json.loads(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k trials / 1M samples")
    parser.add_argument("--store", type=Path, help="store folder to write (or reuse, if present)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "report.json")
    args = parser.parse_args()
    spec = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    store = args.store or work / "store"
    try:
        generate_s = None
        if not (store / "trials").is_dir():
            start = time.perf_counter()
            summary = write_synthetic_store(store, spec)
            generate_s = round(time.perf_counter() - start, 2)
            print(f"store: {summary.trials:,} trials, {summary.samples:,} samples, "
                  f"{summary.files} files, {summary.bytes / 2**20:.0f} MiB in {generate_s} s")
        result = run_report(store, work / "report.html")
        secs, peak = result["seconds"], result["peak_rss_bytes"]
        assert isinstance(secs, float) and isinstance(peak, int)
        report = result["report"]
        assert isinstance(report, dict)
        verdict = {True: "PASS", False: "FAIL"}
        print(f"report: {secs:.1f} s (target ≤ {TARGET_SECONDS:.0f} s) "
              f"{verdict[secs <= TARGET_SECONDS]}; peak RSS {peak / 2**30:.2f} GiB "
              f"(target ≤ 4 GiB) {verdict[peak <= TARGET_BYTES]}")
        print(f"child CPU time {result['cpu_seconds']} s (wall time includes waiting for the "
              f"CPU: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        print(f"stages (s): {report['timings']}; html {report['bytes'] / 2**20:.1f} MiB")
        record = {
            "benchmark": "report", "quick": args.quick, "trials": report["trials"],
            "spec": {k: v for k, v in asdict(spec).items() if k != "start"},
            "generate_seconds": generate_s, "report_seconds": secs,
            "report_cpu_seconds": result["cpu_seconds"], "peak_rss_bytes": peak,
            "target_seconds": TARGET_SECONDS, "target_rss_bytes": TARGET_BYTES,
            "pass": secs <= TARGET_SECONDS and peak <= TARGET_BYTES,
            "compare_seconds": report["timings"].get("compare"), "stages": report["timings"],
            "html_bytes": report["bytes"], "verdicts": report["verdicts"],
            "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "python": platform.python_version(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
