"""Items 5 and 6: figures produced by scripts/bench_report.py and scripts/bench_detector.py.

Both scripts are run as they are (they own their JSON files in bench/results/); this module
adds the compare query on the report's synthetic store and turns their output into table rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, Figure

GIB = 2**30


def run_child(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of one child process run from the repository root, and its output."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def compare_query(store: Path, baseline: str, candidate: str) -> dict[str, Any]:
    """``harness compare`` on the report's store, in a child, timed with its peak RSS."""
    code = ("import resource, sys; from harness.cli import main; rc = 0\n"
            "try:\n    main.main(standalone_mode=False)\n"
            "except SystemExit as e:\n    rc = e.code or 0\n"
            "sys.stderr.write('@@maxrss %d\\n' % resource.getrusage(resource.RUSAGE_SELF)"
            ".ru_maxrss)\nsys.exit(rc)\n")
    argv = [sys.executable, "-c", code, "compare", "--baseline", baseline, "--candidate",
            candidate, "--results", str(store), "--json"]
    seconds, done = run_child(argv)
    peak = [int(line.split()[1]) * 1024 for line in done.stderr.splitlines()
            if line.startswith("@@maxrss ")]
    if done.returncode not in (0, 1):  # 1 = a gate failed; none is given, so not expected
        raise RuntimeError(f"harness compare failed: {done.stderr[-1500:]}")
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    return {"seconds": seconds, "peak_rss_bytes": peak[0] if peak else None,
            "exit_code": done.returncode, "cells": len(answer.get("cells", [])),
            "verdicts": answer.get("verdicts")}


def report(work: Path, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    store = work / "report-store"
    out = RESULTS / "report.json"
    argv = [sys.executable, "scripts/bench_report.py", "--store", str(store), "--out", str(out)]
    if quick:
        argv.insert(2, "--quick")
    _, done = run_child(argv)
    if done.returncode != 0:
        raise RuntimeError(f"bench_report.py failed: {done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    spec = result["spec"]
    query = compare_query(store, spec["builds"][0], spec["builds"][1])
    shutil.rmtree(store, ignore_errors=True)
    scale = f"{result['trials']:,} trials"
    stages = sorted((result.get("stages") or {}).items(), key=lambda kv: -kv[1])
    figures = [
        Figure("5 report: build time", result["report_seconds"], "s", scale, "<= 30 s",
               result["report_seconds"] <= 30.0,
               "slowest stages: " + ", ".join(f"{name} {secs:.1f} s"
                                              for name, secs in stages[:5])),
        Figure("5 report: peak RSS", result["peak_rss_bytes"] / GIB, "GiB", scale, "<= 4 GiB",
               result["peak_rss_bytes"] <= 4 * GIB, ""),
        Figure("5 compare query (harness compare)", query["seconds"], "s", scale, "<= 30 s",
               query["seconds"] <= 30.0,
               f"peak RSS {query['peak_rss_bytes'] / GIB:.2f} GiB"
               if query["peak_rss_bytes"] else ""),
    ]
    if quick:  # issue 50: the report at 100,000 trials in half the time
        figures.insert(1, Figure("5 report at 100,000 trials (issue 50)",
                                 result["report_seconds"], "s", scale, "<= 15 s",
                                 result["report_seconds"] <= 15.0,
                                 f"recommend {result['stages'].get('recommend', 0):.1f} s"))
    return figures, {"bench_report": result, "compare_query": query,
                     "stdout": done.stdout[-3000:]}


def detector(quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    out = RESULTS / "detector.json"
    argv = [sys.executable, "scripts/bench_detector.py", "--out", str(out)]
    if not quick:
        argv.append("--full")
    _, done = run_child(argv)
    if done.returncode != 0:
        raise RuntimeError(f"bench_detector.py failed: {done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    figures = []
    for raw in result["figures"]:
        name = raw["name"]
        keep = raw["met"] is not None or name.startswith(("history: delay in nights, median",
                                                          "history: 5% step found"))
        if not keep:
            continue
        value = raw["value"]
        is_rate = not name.startswith(("history: delay", "repetitions"))
        unit = "%" if is_rate else "reps" if name.startswith("repetitions") else "nights"
        spread = (f"CI95 {100 * raw['low']:.1f}-{100 * raw['high']:.1f}%"
                  if raw.get("low") is not None else "-")
        figures.append(Figure(f"6 detector: {name}", 100 * value if is_rate else value,
                              unit, spread, raw["target"], raw["met"],
                              raw.get("note", "")))
    return figures, {"detector": {k: result[k] for k in ("mode", "params", "elapsed_s")
                                  if k in result},
                     "load_average": os.getloadavg()}


def script(name: str, quick: bool, *quick_only: str
           ) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Run ``scripts/NAME.py`` (``--quick`` and ``quick_only`` as asked); the JSON it wrote to
    ``bench/results/`` and its process."""
    out = RESULTS / f"{name.removeprefix('bench_')}.json"
    argv = [sys.executable, f"scripts/{name}.py", "--out", str(out)]
    if quick:
        argv += ["--quick", *quick_only]
    _, done = run_child(argv)
    if done.returncode != 0:
        raise RuntimeError(f"{name}.py failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text()), done


def site(work: Path, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    """Item 4 of issue 39: scripts/bench_site.py's synthetic year (``--quick``: 30 nights).

    A quick run leaves out what no row of this figure shows: the report beside the site (the
    report has figures 5 and 14; about 20 s here) and the browser walk with its link check
    (tests/site walk a site in Chromium; about 15 s)."""
    r, done = script("bench_site", quick, "--no-report", "--no-walk")
    scale = f"{r['trials']:,} trials, {r['spec']['nights']} nights"
    full, inc, sizes, load = r["full"], r["incremental"], r["sizes"], r["index_load"]
    report = r.get("report")
    beside = f"; the report on the same store {report['seconds']:.1f} s" if report else ""
    figures = [
        Figure("13 site: full build", full["seconds"], "s", scale, "<= 300 s",
               r["met"]["full"], f"peak RSS {full['peak_rss_bytes'] / GIB:.2f} GiB{beside}"),
        Figure("13 site: one more night", inc["seconds"], "s", scale, "<= 60 s",
               r["met"]["incremental"],
               f"{inc['output']['written']} files written, {inc['output']['unchanged']} kept"),
        Figure("13 site: largest page", sizes["largest_page_bytes"] / 2**20, "MiB", scale,
               "<= 2 MiB", r["met"]["page"], sizes["largest_page"]),
        Figure("13 site: index load (Chromium)", load["seconds"] if load else None, "s",
               scale, "<= 2 s", r["met"]["index_load"],
               "beyond an empty page's load" if load else "chromium not installed"),
    ]
    return figures, {"bench_site": r, "stdout": done.stdout[-3000:]}


def recommend(work: Path, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    """Item 1 of issue 50: scripts/bench_recommend.py on the farm year (``--quick``: 29
    nights): recommend for one phone, the dashboard's rankings, the report on the whole store."""
    r, done = script("bench_recommend", quick)
    scale = "farm year, 29 nights" if quick else "farm year, 2,184,000 trials"
    rows = (("recommend", "14 recommend --device (one phone)"),
            ("rankings", "14 dashboard rankings from scratch (10 phones)"),
            ("report", "14 report on the farm year"))
    figures = []
    for key, name in rows:
        got = r[key]["new"]
        target = r["targets"][key]
        figures.append(Figure(name, got["seconds"], "s", scale, f"<= {target:g} s",
                              got["seconds"] <= target,
                              f"load {got['load_1min'][0]:.1f}-{got['load_1min'][1]:.1f}, "
                              f"peak RSS {got['peak_rss_bytes'] / GIB:.2f} GiB"))
    return figures, {"bench_recommend": r, "stdout": done.stdout[-3000:]}
