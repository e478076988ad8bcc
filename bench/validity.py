"""Validity gates: impossible results injected through a fake engine on a virtual phone.

The engine is a YAML engine (``harness.engines.generic``) whose "build" is a small shell script
that prints canned jsonl results, one case per cell (the cell's n_ctx picks it): infinite, NaN,
zero and negative rates, a decode faster than any memory, a peak below the weights with mmap off,
token counts other than the cell's, two threads asked and one run; and sane results, which must
pass. The figure is injected impossible results caught with the right reason, over all of them
(target: all), with no sane one flagged. ``tests/run/test_validity_e2e.py`` runs the same kit.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Figure, Lab

ENGINE = "canned"
BUILD = "canned-results"
TOOL = "canned-engine"


@dataclass(frozen=True)
class Case:
    n_ctx: int  # the cell's n_ctx: which canned result the script prints
    name: str
    reason: str | None  # the start of the expected invalid_reason; None: a sane result
    mmap: bool = True
    threads: int = 1


CASES = (
    Case(256, "sane", None),
    Case(257, "inf tg", "impossible rate: tg_tps=inf"),
    Case(258, "nan pp", "impossible rate: pp_tps=nan"),
    Case(259, "zero tg", "impossible rate: tg_tps=0"),
    Case(260, "negative pp and ttft", "impossible rate: pp_tps=-5, ttft_ms=-64"),
    Case(261, "decode faster than memory", "decode faster than memory: 1e+07 tok/s"),
    Case(262, "peak below weights, mmap off", "peak below the weights with mmap off",
         mmap=False),
    Case(263, "token counts differ", "token counts differ: engine ran n_gen=8, the cell asks "
                                     "n_gen=16"),
    Case(264, "threads not applied", "config not applied: 2 threads asked, at most 1 ran",
         threads=2),
    Case(265, "sane, mmap off, holds the weights", None, mmap=False),
)

# $1 n_ctx (the case), $2 n_prompt, $3 n_gen. Sleeps so the on-device watcher sees the process
# (its peak and thread count); case 265 holds 8 MiB in a shell variable, the others hold only the
# shell (about 2 MiB).
SCRIPT = textwrap.dedent("""\
    p=$2; g=$3; pp=500; tg=50; ttft=64; hold=
    case $1 in
    257) tg=Infinity;;
    258) pp=NaN;;
    259) tg=0;;
    260) pp=-5; ttft=-64;;
    261) tg=10000000;;
    263) g=8;;
    265) hold=$(dd if=/dev/zero bs=1048576 count=8 2>/dev/null | tr '\\0' x);;
    esac
    sleep 0.5
    q='"'
    echo "{${q}n_prompt$q: $p, ${q}n_gen$q: $g, ${q}n_depth$q: 0, ${q}pp$q: $pp, ${q}tg$q: $tg, \\
    ${q}ttft_ms$q: $ttft, ${q}held$q: ${#hold}}"
    """)

ENGINE_YAML = f"""\
name: {ENGINE}
tool: {TOOL}
argv: ["sh", "{{binary}}", "{{n_ctx}}", "{{n_prompt}}", "{{n_gen}}"]
output:
  format: jsonl
  prompt_tps: pp
  gen_tps: tg
  ttft: {{key: ttft_ms, scale: 0.001}}
"""

MATRIX = """\
name: validity
description: canned impossible results through a fake engine (bench/validity.py)
axes:
  engine: [{engine}]
  build: [{build}]
  model: [tiny]
  quant: [F16]
  n_ctx: {n_ctx}
  threads: [1]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: 16, n_depth: 0}}
repetitions: {reps}
include: {include}
cooldown: {{max_thermal_status: 2, max_temperature_c: 90, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 60}}
"""


def write_kit(folder: Path, reps: int = 1) -> tuple[Path, Path]:
    """The engine YAML, the script's build and the matrix under ``folder``: (matrix, builds)."""
    from harness.artifacts.builds import write_build

    folder.mkdir(parents=True, exist_ok=True)
    script = folder / TOOL
    script.write_text(SCRIPT)
    script.chmod(0o755)
    builds = folder / "builds"
    write_build(builds, BUILD, {f"bin/{TOOL}": script}, engine=ENGINE, abi="x86_64",
                version="1", commit="0", replace=True)
    engine = folder / f"{ENGINE}.yaml"
    engine.write_text(ENGINE_YAML)
    plain = [c.n_ctx for c in CASES if c.mmap and c.threads == 1]
    # the other cases are whole combinations of their own (mmap and threads set)
    include = [{"engine": str(engine), "build": BUILD, "model": "tiny", "quant": "F16",
                "n_ctx": c.n_ctx, "threads": c.threads, "mmap": c.mmap}
               for c in CASES if c.n_ctx not in plain]
    matrix = folder / "validity.yaml"
    matrix.write_text(MATRIX.format(engine=engine, build=BUILD, n_ctx=plain, reps=reps,
                                    include=json.dumps(include)))
    return matrix, builds


def judge(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per case, whether each trial came out as expected (caught with the reason, or passed)."""
    by_ctx = {c.n_ctx: c for c in CASES}
    verdicts: list[dict[str, Any]] = []
    for row in rows:
        case = by_ctx[int(row["n_ctx"])]
        reason = row.get("invalid_reason")
        if case.reason is None:
            right = row.get("outcome") == "ok" and row.get("valid") is True
        else:
            right = (row.get("outcome") == "ok" and row.get("valid") is False
                     and isinstance(reason, str) and reason.startswith(case.reason))
        verdicts.append({"case": case.name, "n_ctx": case.n_ctx, "right": right,
                         "valid": row.get("valid"), "invalid_reason": reason,
                         "outcome": row.get("outcome")})
    injected = [v for v in verdicts if by_ctx[int(v["n_ctx"])].reason is not None]
    sane = [v for v in verdicts if by_ctx[int(v["n_ctx"])].reason is None]
    return {"injected": len(injected), "caught": sum(v["right"] for v in injected),
            "sane": len(sane), "sane_passed": sum(v["right"] for v in sane),
            "trials": verdicts}


def _rows(results: Path) -> list[dict[str, Any]]:
    from harness import store

    frame = store.read_table(results, "trials")
    rows: list[dict[str, Any]] = []
    for record in frame.to_dict("records"):
        valid = record.get("valid")
        record["valid"] = None if valid is None or valid != valid else bool(valid)
        reason = record.get("invalid_reason")
        record["invalid_reason"] = reason if isinstance(reason, str) else None
        rows.append(record)
    return rows


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    reps = 1 if quick else 3
    matrix, builds = write_kit(lab.work / "validity", reps)
    results = lab.work / "validity-results"
    device = lab.devices(1)[0]
    from harness.run.runner import RunOptions, execute

    execute(matrix, [device], RunOptions(results=results, builds=builds))
    found = judge(_rows(results))
    injected, caught = found["injected"], found["caught"]
    sane_ok = found["sane_passed"] == found["sane"]
    figure = Figure(
        "validity: injected impossible results caught", caught / injected if injected else None,
        "ratio", f"{caught}/{injected} caught; {found['sane_passed']}/{found['sane']} sane "
                 "passed", "all", injected > 0 and caught == injected and sane_ok,
        "inf, nan, 0, negative rates; decode faster than memory; peak below weights (mmap "
        "off); token counts; threads not applied")
    return [figure], {"reps": reps, **found}
