#!/usr/bin/env python3
"""How much slower is ``host-slow`` than ``host-release``? A benchmark, not a test.

Runs both host builds of the vendored llama.cpp on the same cell (the bench-size synthetic model
when its ladder is cached, else the tiny one), alternating A, B, A, B ... so drift in machine
load hits both alike, and prints the slow/release ratio of generation and prompt throughput per
round with the median and the range over rounds. The builds come from the content cache
(compiled on first use, about 5 minutes each on 2 cores).

    .venv/bin/python scripts/bench_builds.py --rounds 7 --reps 5
    .venv/bin/python scripts/bench_builds.py --size tiny --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import ensure_host_build
from harness.artifacts.testmodels import ensure_ladder, ladder_paths
from harness.cell import Cell
from harness.engines.llama_bench import LlamaBench, parse_output

VARIANTS = ("host-release", "host-slow")


def pick_model(size: str | None, quant: str) -> tuple[str, Path]:
    """The requested size, else bench when already cached, else tiny."""
    if size is None:
        size = "bench" if ladder_paths("bench")[quant].is_file() else "tiny"
    return size, ensure_ladder(size)[quant]


def run_once(build: Build, model: Path, cell: Cell) -> tuple[float, float]:
    """(prompt tok/s, generation tok/s) averaged over the cell's repetitions."""
    argv = LlamaBench().argv(cell, str(build.binary()), str(model))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{build.name}: llama-bench failed\n{result.stderr[-2000:]}")
    records = {r.kind: r for r in parse_output(result.stdout)}
    return float(records["pp"].avg_ts or 0), float(records["tg"].avg_ts or 0)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("tiny", "bench"), default=None)
    parser.add_argument("--quant", default="Q4_K_M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)  # 2-core shared hosts: less noise
    parser.add_argument("--n-prompt", type=int, default=64)
    parser.add_argument("--n-gen", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()

    size, model = pick_model(args.size, args.quant)
    with tempfile.TemporaryDirectory(prefix="bench-builds-") as tmp:
        builds = {v: ensure_host_build(v, Path(tmp)) for v in VARIANTS}
        cell = Cell(
            build="", model=size, quant=args.quant, n_ctx=args.n_prompt + args.n_gen,
            type_k="f16", type_v="f16", threads=args.threads, affinity="all", flash_attn="auto",
            mmap=True, n_batch=512, n_ubatch=512, n_prompt=args.n_prompt, n_gen=args.n_gen,
            repetitions=args.reps,
        )
        rounds = []
        for number in range(args.rounds):
            figures = {v: run_once(builds[v], model, cell) for v in VARIANTS}
            (pp_fast, tg_fast), (pp_slow, tg_slow) = figures[VARIANTS[0]], figures[VARIANTS[1]]
            rounds.append({
                "round": number, "release_pp": pp_fast, "release_tg": tg_fast,
                "slow_pp": pp_slow, "slow_tg": tg_slow,
                "tg_ratio": tg_slow / tg_fast, "pp_ratio": pp_slow / pp_fast,
            })
            if not args.json:
                print(f"round {number}: tg {tg_fast:8.1f} -> {tg_slow:8.1f} tok/s "
                      f"(x{tg_slow / tg_fast:.3f}), pp {pp_fast:8.1f} -> {pp_slow:8.1f} tok/s "
                      f"(x{pp_slow / pp_fast:.3f})", flush=True)
    result = {
        "model": f"{size} {args.quant}", "threads": args.threads, "n_prompt": args.n_prompt,
        "n_gen": args.n_gen, "reps": args.reps, "rounds": rounds,
        "tg_ratio": summary([r["tg_ratio"] for r in rounds]),
        "pp_ratio": summary([r["pp_ratio"] for r in rounds]),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key in ("tg_ratio", "pp_ratio"):
            s = result[key]
            print(f"{key} slow/release: median {s['median']:.3f} "
                  f"(range {s['min']:.3f}..{s['max']:.3f}) over {args.rounds} rounds, "
                  f"{size} {args.quant}, t{args.threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
