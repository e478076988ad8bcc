"""Benchmark: recommend on the synthetic farm year, and what is made of it (issue 50, item 1).

Writes the farm year of ``scripts/bench_site.py`` (10 phones x 200 configurations x 3 repetitions
a night over 364 nights, 2,184,000 trials; ``--quick``: its 29 nights), then times in child
processes, each from its own start: ``harness recommend --device SYN0000 --json`` (target 5 s),
``harness report --json`` on the whole store (target 60 s), and the dashboard's per-phone
rankings from scratch (``site.build.recommend_from_store`` for each phone's newest build, as a
site build with an empty memo asks them; target 60 s). ``--old DIR`` runs the same children with
another checkout's ``harness`` (e.g. ``git worktree add /tmp/rec-old 3318037``) beside each, in
turn, so a before/after pair shares the machine's load. Writes ``bench/results/recommend.json``.

Usage: .venv/bin/python scripts/bench_recommend.py [--quick] [--store DIR] [--old DIR]
       [--only recommend,rankings,report]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_site import QUICK, YEAR  # scripts/ is the script's own folder

from harness.testing.synthstore import write_synthetic_store

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"recommend": 5.0, "rankings": 60.0, "report": 60.0}
DEVICE = "SYN0000"
CODE = {
    "recommend": ("import sys; from harness.cli.analysis import recommend_command as c; "
                  "sys.exit(c.main(['--device', sys.argv[2], '--results', sys.argv[1], "
                  "'--json'], standalone_mode=True))"),
    "report": ("import sys; from harness.cli.report import report; sys.exit(report.main("
               "['--results', sys.argv[1], '-o', sys.argv[1] + '.html', '--json'], "
               "standalone_mode=True))"),
    "rankings": (
        "import sys, json, time; from pathlib import Path\n"
        "from harness.store import read_table\n"
        "from harness.site.build import recommend_from_store\n"
        "root = Path(sys.argv[1]); t = time.perf_counter()\n"
        "f = read_table(root, 'trials', columns=['device_serial', 'build_id', 'started_at'])\n"
        "picks = {}\n"
        "for serial, rows in f.groupby('device_serial', observed=True):\n"
        "    build = rows.sort_values('started_at')['build_id'].iloc[-1]\n"
        "    days = sorted({d.date().isoformat() for d in\n"
        "                   rows[rows['build_id'] == build]['started_at']})\n"
        "    rec = recommend_from_store(root, str(serial), str(build), days)\n"
        "    picks[str(serial)] = len(rec.get('picks', []))\n"
        "print(json.dumps({'phones': len(picks), 'picks': sum(picks.values()),\n"
        "                  'seconds_in_process': time.perf_counter() - t}))\n"),
}


def child(which: str, store: Path, checkout: Path) -> dict[str, Any]:
    """One child with ``checkout``'s harness first on its path: wall time, CPU, peak RSS."""
    argv = [sys.executable, "-c", CODE[which], str(store), DEVICE]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                          cwd=checkout)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{which} ({checkout}) failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "peak_rss_bytes": after.ru_maxrss * 1024,
            "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
            "output": done.stdout}


def summary(which: str, output: str) -> dict[str, Any]:
    """What a child answered, in a few numbers (so two checkouts can be held side by side)."""
    answer = json.loads(output)
    if which == "recommend":
        return {"picks": len(answer["picks"]), "rejected": len(answer["rejected"]),
                "best": answer["picks"][0]["label"] if answer["picks"] else None}
    if which == "report":
        return {"trials": answer["trials"], "timings": answer["timings"]}
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="29 nights, not 364")
    parser.add_argument("--store", type=Path, help="store folder to write (or reuse)")
    parser.add_argument("--old", type=Path, help="another checkout to time beside this one")
    parser.add_argument("--only", default="recommend,rankings,report")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" /
                        "recommend.json")
    args = parser.parse_args()
    spec = QUICK if args.quick else YEAR
    work = Path(tempfile.mkdtemp(prefix="bench-recommend-"))
    store = args.store or work / "store"
    record: dict[str, Any] = {"benchmark": "recommend", "quick": args.quick,
                              "targets": TARGETS, "cpus": os.cpu_count()}
    try:
        if not (store / "trials").is_dir():
            made = write_synthetic_store(store, spec, only_nights=range(spec.nights - 1))
            print(f"store: {made.trials:,} trials, {made.bytes / 2**20:.0f} MiB")
        for which in args.only.split(","):
            sides = {"new": ROOT, **({"old": args.old} if args.old else {})}
            for side, checkout in sides.items():
                got = child(which, store, checkout)
                got["answer"] = summary(which, got.pop("output"))
                record.setdefault(which, {})[side] = got
                print(f"{which} ({side}): {got['seconds']} s (target <= {TARGETS[which]:g} s"
                      f" for new), load {got['load_1min']}, {got['answer']}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
