"""The benchmark suite of the harness itself (issue 9): run every figure, print one table.

    .venv/bin/python -m bench.run --quick        # under 5 minutes on a 2-core host
    .venv/bin/python -m bench.run                # more pairs and rounds (about 15 minutes)
    .venv/bin/python -m bench.run --only push,memory
    .venv/bin/python -m bench.run --only sampler --quick --busy 2   # on a loaded machine
    nox -s bench -- --quick

Figures that drive virtual phones run first, one at a time, then the CPU-only ones (report,
detector), so no figure competes with another for the host's cores. Each writes
bench/results/<name>.json (figures, raw data, load average before and after); the table is also
written as bench/results/summary.json and summary.md. docs/benchmarks.md explains every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    farm,
    farmsim,
    gpusampler,
    memory,
    overhead,
    paging,
    push,
    realmodel,
    sampler,
    scripts,
    sustained,
    validity,
)
from bench.common import RESULTS, Figure, Lab, machine, open_lab, parse_models_once
from bench.runtime import QUICK_TARGET_S, builds_needed, prepare, run_time_figure, total_line

PhoneFigure = Callable[[Lab, bool], tuple[list[Figure], dict[str, Any]]]
HostFigure = Callable[[Path, bool], tuple[list[Figure], dict[str, Any]]]
PHONE_FIGURES: dict[str, PhoneFigure] = {
    "sampler": sampler.measure, "overhead": overhead.measure, "push": push.measure,
    "memory": memory.measure,
    "real": realmodel.measure, "farm": farm.measure,
    "validity": validity.measure, "sustained": sustained.measure, "paging": paging.measure,
    "gpusampler": gpusampler.measure,
}
HOST_FIGURES: dict[str, HostFigure] = {
    "report": scripts.report,
    "site": scripts.site,
    "recommend": scripts.recommend,
    "detector": lambda work, quick: scripts.detector(quick),
    "farmsim": farmsim.measure,
}
NAMES = (*PHONE_FIGURES, *HOST_FIGURES)


def met_text(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[met]


def table(figures: Sequence[Figure]) -> str:
    """The summary as fixed-width text: figure, value, spread, target, met?"""
    head = ("figure", "value", "spread", "target", "met?")
    rows = [head] + [(f.figure, f.value_text(), f.spread, f.target, met_text(f.met))
                     for f in figures]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(figures: Sequence[Figure], loads: dict[str, Any], mode: str) -> str:
    """The table for docs/benchmarks.md, with the load average each group ran under."""
    out = ["| figure | value | spread | target | met? | load (1 min) | note |",
           "|---|---|---|---|---|---|---|"]
    for f in figures:
        group = f.figure.split(" ", 1)[0]
        load = loads.get(group, "")
        out.append(f"| {f.figure} | {f.value_text()} | {f.spread} | {f.target} | "
                   f"{met_text(f.met)} | {load} | {f.note} |")
    return f"Mode: {mode}.\n\n" + "\n".join(out) + "\n"


def _record(name: str, mode: str, figures: list[Figure], data: dict[str, Any],
            before: Sequence[float], seconds: float) -> Path:
    from bench.common import write_result

    data = {**data, "elapsed_s": round(seconds, 1),
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    return write_result(name, mode, figures, data, load_before=[round(x, 2) for x in before])


def run_suite(names: Sequence[str], quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    mode = "quick" if quick else "full"
    figures: list[Figure] = []
    meta: dict[str, Any] = {"mode": mode, "machine": machine(), "figures": {}}

    def one(name: str, call: Callable[[], tuple[list[Figure], dict[str, Any]]]) -> None:
        before, start = os.getloadavg(), time.monotonic()
        print(f"[bench] {name} (load {before[0]:.2f}) ...", flush=True)
        try:
            found, data = call()
        except Exception as error:  # one broken figure must not hide the others
            traceback.print_exc()
            found = [Figure(f"{name}: FAILED", None, "", "-", "-", False, str(error)[:200])]
            data = {"error": repr(error)}
        seconds = time.monotonic() - start
        # report.json and detector.json belong to their scripts; the suite's rows go beside
        _record(name if name in PHONE_FIGURES else f"{name}-figures", mode, found, data,
                before, seconds)
        figures.extend(found)
        meta["figures"][name] = {"seconds": round(seconds, 1),
                                 "load_1min_before": round(before[0], 2),
                                 "load_1min_after": round(os.getloadavg()[0], 2)}
        print(f"[bench] {name}: {seconds:.0f} s", flush=True)

    phone = [n for n in names if n in PHONE_FIGURES]
    if phone:
        with open_lab(work / "lab") as lab, parse_models_once():
            for name in phone:
                one(name, lambda name=name: PHONE_FIGURES[name](lab, quick))  # type: ignore[misc]
    for name in [n for n in names if n in HOST_FIGURES]:
        one(name, lambda name=name: HOST_FIGURES[name](work, quick))  # type: ignore[misc]
    return figures, meta


def _group_loads(meta: dict[str, Any]) -> dict[str, str]:
    """Figure number -> load average text, from the module that measured it."""
    module_of = {"1": "sampler", "2": "push", "3": "farm", "4": "sampler", "5": "report",
                 "6": "detector", "7": "memory", "8": "real",
                 "12": "gpusampler", "13": "site", "14": "recommend", "17": "farmsim"}
    loads = {}
    for number, module in module_of.items():
        info = meta["figures"].get(module)
        if info:
            loads[number] = f"{info['load_1min_before']:.1f}-{info['load_1min_after']:.1f}"
    return loads


def busy(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that each spin a core until killed: a loaded machine, on purpose."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pairs; under 5 minutes")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(NAMES)}")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="load the machine with N busy processes for the whole run "
                             "(each spins a core; the load is stated with every figure)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    names = [n for n in NAMES if n in names]  # always the suite's order
    work = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    start = time.monotonic()
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        # compile (or find cached) before the spinners (they would starve the build) and before
        # any figure: a fresh cache's compiles are the set-up's time, not a figure's
        setup = prepare(builds_needed(names, PHONE_FIGURES), work / "builds")
        spinners = busy(args.busy)
        figures, meta = run_suite(names, args.quick, work)
        meta["busy_processes"] = args.busy
    finally:
        for spinner in spinners:  # ours, by pid
            spinner.kill()
            spinner.wait()
        if args.keep:
            print(f"[bench] kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    meta["elapsed_s"] = round(time.monotonic() - start, 1)
    total = run_time_figure(meta["elapsed_s"], meta["figures"], args.quick,
                            set(names) == set(NAMES), setup)
    figures.append(total)
    meta["total"] = {"seconds": meta["elapsed_s"], "quick_target_s": QUICK_TARGET_S,
                     "met": total.met, "setup": setup}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "summary.json").write_text(json.dumps(
        {**meta, "table": [asdict(f) for f in figures]}, indent=2) + "\n")
    (RESULTS / "summary.md").write_text(markdown(figures, _group_loads(meta), meta["mode"]))
    print()
    print(table(figures))
    print(total_line(total))
    print(f"\n{meta['mode']} run, {meta['elapsed_s']:.0f} s on {meta['machine']['cpus']} cores; "
          f"load average at start {meta['machine']['load_average']}; "
          f"JSON in {RESULTS}")
    return 0


if __name__ == "__main__":
    from harness.interrupt import Interrupted, interruptible

    try:
        with interruptible():  # SIGTERM (a time limit) stops the phones it started, as Ctrl-C
            sys.exit(main())
    except Interrupted as stop:
        print(f"[bench] stopped by {stop}; its phones and servers are stopped", file=sys.stderr)
        sys.exit(128 + stop.signum)
