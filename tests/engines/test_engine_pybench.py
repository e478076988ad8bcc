"""The llama-cpp-python in-process bench: argv, and a real run on the tiny model."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cell import Cell
from harness.engines.llama_bench import parse_output
from harness.engines.pybench import PyBench

CELL = Cell(
    build="llama-cpp-python", model="tiny", quant="Q4_K_M", n_ctx=128, type_k="q8_0",
    type_v="q8_0", threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=64,
    n_ubatch=32, n_prompt=32, n_gen=8, repetitions=2,
)


def test_argv_runs_the_module_with_every_cell_field() -> None:
    argv = PyBench().argv(CELL, "python3", "/m.gguf")
    assert argv[:3] == ["python3", "-m", "harness.engines.pybench"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--n-ctx"] == "128" and pairs["--type-v"] == "q8_0"
    assert pairs["--flash-attn"] == "on"  # quantised V: auto becomes on
    assert pairs["--load-mode"] == "mmap"  # llama.cpp's own name of the load mode


def test_pinned_affinity_is_unsupported() -> None:
    reason = PyBench().supports(dataclasses.replace(CELL, affinity="0xf0"))
    assert reason is not None and "cannot pin" in reason


@pytest.mark.slow
def test_real_run_prints_llama_bench_records(tiny_ladder: dict[str, Path]) -> None:
    engine = PyBench()
    argv = engine.argv(CELL, sys.executable, str(tiny_ladder["Q4_K_M"]))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    records = parse_output(result.stdout)
    assert [(r.kind, r.n_prompt, r.n_gen, r.type_v) for r in records] == [
        ("pp", 32, 0, "q8_0"), ("tg", 0, 8, "q8_0"),
    ]
    assert all(len(r.samples_ns) == 2 and r.model_n_params for r in records)
    assert records[0].extra["n_ctx"] == 128
    measurements = engine.measure(engine.parse(result.stdout))
    assert [m.rep for m in measurements] == [0, 1]
    assert all(m.gen_tps and m.prompt_tps and m.ttft_s for m in measurements)
