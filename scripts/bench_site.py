"""Benchmark: the farm dashboard on a synthetic year, beside the report (issue 39, item 4).

Writes a synthetic store of 365 nights x 10 phones x 200 configurations x 3 repetitions
(2,190,000 trials; ``--quick``: 30 nights) one night short, builds the site from scratch in a
child process (``harness site build --json``: wall time, the child's peak RSS, pages), writes
the last night and builds again (the incremental morning), then measures the pages' sizes, the
index's load in headless Chromium (the median of five loads of the index less the median of
five loads of an empty page, same flags, so the browser's own start is not counted), and the
current report on the same store (``harness report --json``). Prints each figure against its
target and writes ``bench/results/site.json``.

Usage: .venv/bin/python scripts/bench_site.py [--quick] [--store DIR] [--keep] [--no-report]
                                           [--no-walk]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from harness.testing.sitewalk import broken_links, walk
from harness.testing.synthstore import SynthSpec, write_synthetic_store

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
TARGETS = {"full_seconds": 300.0, "incremental_seconds": 60.0, "page_bytes": 2 * 2**20,
           "index_load_seconds": 2.0}
BUILDS = tuple(f"b{4100 + i}" for i in range(52))  # a build a week
# 10 phones x (5 quants x 4 contexts x 2 KV types x 5 thread counts = 200 configs) x 3 reps
YEAR = SynthSpec(devices=10, quants=("Q2_K", "Q4_0", "Q4_K_M", "Q6_K", "Q8_0"),
                 n_ctx=(512, 1024, 2048, 4096), kv_types=("f16", "q8_0"),
                 threads=(1, 2, 4, 6, 8), reps=3, nights=365, builds=BUILDS,
                 regressed_build="b4140", samples_per_trial=2, validity=True)
QUICK = replace(YEAR, nights=30, builds=BUILDS[:5], regressed_build="b4103")
SITE_CMD = ("import sys; from harness.cli.site import site; "
            "sys.exit(site.main(standalone_mode=True))")
REPORT_CMD = ("import sys; from harness.cli.report import report; "
              "sys.exit(report.main(standalone_mode=True))")


def child(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` (a ``--json`` command); its wall time, CPU time, peak RSS and output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[3:6])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "peak_rss_bytes": after.ru_maxrss * 1024, "output": json.loads(done.stdout)}


def site_build(store: Path, site: Path) -> dict[str, Any]:
    return child([sys.executable, "-c", SITE_CMD, "build", "--results", str(store),
                  "-o", str(site), "--json"])


def page_sizes(site: Path) -> dict[str, Any]:
    sizes = {str(p.relative_to(site)): p.stat().st_size for p in site.rglob("*")
             if p.is_file() and ".harness-site" not in p.parts}
    pages = {k: v for k, v in sizes.items() if k.endswith(".html")}
    largest = max(pages.items(), key=lambda kv: kv[1])
    by_kind: dict[str, list[int]] = {}
    for path, size in pages.items():
        by_kind.setdefault(path.split("/", 1)[0] if "/" in path else path, []).append(size)
    return {"files": len(sizes), "pages": len(pages), "total_bytes": sum(sizes.values()),
            "largest_page": largest[0], "largest_page_bytes": largest[1],
            "index_bytes": pages.get("index.html"), "json_index_bytes": sizes.get("index.json"),
            "median_bytes_by_kind": {k: int(statistics.median(v)) for k, v in by_kind.items()}}


def _load(page: Path, profile: Path) -> float:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update",
           f"--user-data-dir={profile}", "--allow-file-access-from-files",
           "--window-size=1280,2000", f"--screenshot={profile / 'shot.png'}", page.as_uri()]
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, timeout=180, check=True)
    return time.perf_counter() - start


def index_load(site: Path, work: Path) -> dict[str, Any] | None:
    """Seconds Chromium takes to load, run and paint the index, beyond an empty page's."""
    if not CHROMIUM.exists():
        print("!!! /usr/bin/chromium is not installed: the index load was NOT measured !!!")
        return None
    blank = work / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>\n", encoding="utf-8")
    index, empty = [], []
    for i in range(5):  # alternate, so a busier moment falls on both
        empty.append(_load(blank, work / f"chromium-b{i}"))
        index.append(_load(site / "index.html", work / f"chromium-i{i}"))
    return {"index_s": [round(x, 3) for x in index], "blank_s": [round(x, 3) for x in empty],
            "seconds": round(statistics.median(index) - statistics.median(empty), 3)}


def browser_walk(site: Path, work: Path) -> dict[str, Any] | None:
    """Index -> phone -> configuration, night and build in Chromium, and every link checked."""
    if not CHROMIUM.exists():
        return None
    start = time.perf_counter()
    visits = walk(site, work / "walk")
    broken = broken_links(site)
    return {"pages": [str(v.page.relative_to(site)) for v in visits],
            "console_messages": sum(len(v.console) for v in visits),
            "headings": {v.kind: v.dom.count("<h2>") for v in visits},
            "broken_links": len(broken), "broken_examples": broken[:10],
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 nights, not 365")
    parser.add_argument("--store", type=Path, help="store folder to write (or reuse)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--no-report", action="store_true", help="skip the report beside it")
    parser.add_argument("--no-walk", action="store_true",
                        help="skip the browser walk and link check (no figure of their own)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "site.json")
    args = parser.parse_args()
    spec = QUICK if args.quick else YEAR
    work = Path(tempfile.mkdtemp(prefix="bench-site-"))
    store = args.store or work / "store"
    site = work / "site"
    record: dict[str, Any] = {"benchmark": "site", "quick": args.quick,
                              "spec": {k: v for k, v in asdict(spec).items() if k != "start"},
                              "targets": TARGETS}
    try:
        start = time.perf_counter()
        if (store / "trials").is_dir():
            shutil.rmtree(store)
        first = write_synthetic_store(store, spec, only_nights=range(spec.nights - 1))
        record["generate_seconds"] = round(time.perf_counter() - start, 2)
        print(f"store: {first.trials:,} trials over {spec.nights - 1} nights, "
              f"{first.bytes / 2**20:.0f} MiB in {record['generate_seconds']} s")
        full = site_build(store, site)
        print(f"site from scratch: {full['seconds']} s, peak RSS "
              f"{full['peak_rss_bytes'] / 2**30:.2f} GiB, {full['output']['written']} files, "
              f"stages {full['output']['timings']}")
        last = write_synthetic_store(store, spec, only_nights=range(spec.nights - 1, spec.nights))
        incremental = site_build(store, site)
        print(f"one more night ({last.trials:,} trials): {incremental['seconds']} s, "
              f"{incremental['output']['written']} files written, "
              f"{incremental['output']['unchanged']} unchanged, "
              f"stages {incremental['output']['timings']}")
        sizes = page_sizes(site)
        print(f"pages: {sizes['pages']}, largest {sizes['largest_page']} "
              f"{sizes['largest_page_bytes'] / 2**10:.0f} KiB, all files "
              f"{sizes['total_bytes'] / 2**20:.0f} MiB")
        load = index_load(site, work)
        if load:
            print(f"index load in Chromium: {load['seconds']} s beyond an empty page "
                  f"(index {load['index_s']}, empty {load['blank_s']})")
        walked = None if args.no_walk else browser_walk(site, work)
        if walked:
            print(f"browser walk: {' -> '.join(walked['pages'])}; "
                  f"{walked['console_messages']} console messages, "
                  f"{walked['broken_links']} broken links over the whole site")
        report = None
        if not args.no_report:
            report = child([sys.executable, "-c", REPORT_CMD, "--results", str(store), "-o",
                            str(work / "report.html"), "--json"])
            print(f"the report on the same store: {report['seconds']} s, peak RSS "
                  f"{report['peak_rss_bytes'] / 2**30:.2f} GiB")
        full["output"].pop("pages_written", None)
        incremental["output"].pop("pages_written", None)
        record.update(
            trials=first.trials + last.trials, full=full, incremental=incremental,
            sizes=sizes, index_load=load, walk=walked,
            report=None if report is None else {
                k: report[k] for k in ("seconds", "cpu_seconds", "peak_rss_bytes")}
            | {"timings": report["output"].get("timings")},
            met={"full": full["seconds"] <= TARGETS["full_seconds"],
                 "incremental": incremental["seconds"] <= TARGETS["incremental_seconds"],
                 "page": sizes["largest_page_bytes"] <= TARGETS["page_bytes"],
                 "index_load": None if load is None
                 else load["seconds"] <= TARGETS["index_load_seconds"]},
            cpus=os.cpu_count(), load_average=os.getloadavg(), python=platform.python_version())
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
