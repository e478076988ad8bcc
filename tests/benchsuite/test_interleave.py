"""Figure 1 within one launch (bench/interleave.py): the reader's shell under mksh with a stand-in
engine, and the pure arithmetic of blocks and paired ratios."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.interleave import (
    Block,
    Launch,
    Mark,
    block_arms,
    blocks_of,
    device_script,
    engine_argv,
    generation_samples,
    paired_ratios,
    parse_marks,
    split_output,
)
from harness.run.ondevice import Rates

# A stand-in for llama-bench: a progress line on stderr before each repetition, ~40 ms of work,
# then one JSON line with samples_ns, as `-o jsonl --progress` prints them.
FAKE_ENGINE = r"""#!/bin/sh
n=0; r=0
while [ $# -gt 0 ]; do case $1 in -n) n=$2; shift;; -r) r=$2; shift;; esac; shift; done
i=1; s=
while [ $i -le $r ]; do
  echo "llama-bench: benchmark 1/1: generation run $i/$r" >&2
  sleep 0.04; s="$s${s:+,}40000000"; i=$((i + 1))
done
echo "{\"n_prompt\": 0, \"n_gen\": $n, \"samples_ns\": [$s]}"
"""


def test_arms_alternate_off_and_on_and_end_off() -> None:
    assert block_arms(4) == ["n", "d", "n", "z", "n", "d", "n", "z", "n"]
    assert block_arms(2, "t") == ["n", "t", "n", "t", "n"]


def test_engine_argv_keeps_the_trial_command_but_its_workload() -> None:
    argv = ["/x/llama-bench", "-m", "m.gguf", "-p", "32", "-n", "512", "-t", "1", "-r", "1",
            "-o", "jsonl", "-v"]
    assert engine_argv(argv, 32, 90) == [
        "/x/llama-bench", "-m", "m.gguf", "-p", "0", "-n", "32", "-t", "1", "-r", "90",
        "-o", "jsonl", "-v", "--progress"]
    with pytest.raises(ValueError, match="-r"):
        engine_argv(["/x/llama-bench", "-p", "1", "-n", "2"], 32, 9)


def test_marks_sum_threads_and_keep_unreadable_values_as_none() -> None:
    text = ("b 0 n 10 5 300 100.50 2000000000,1000 3000000000,0\n"
            "b 1 d 40 5 310 102.50 4500000000,2000 3000000000,0\n"
            "x 1 3 1\n"
            "b 2 n - - - 104.50\n"
            "x 9 1 1\n"
            "garbage\n")
    marks = parse_marks(text)
    assert marks[0] == Mark("n", 15, 300.0, 100.5, 5_000_001_000)
    assert marks[1].sampler_ticks == 4 and marks[1].sched_ns == 7_500_002_000
    assert marks[2] == Mark("n", None, None, 104.5, None)
    assert set(marks) == {0, 1, 2}


def test_blocks_skip_the_switch_and_count_sched_time_over_the_whole_block() -> None:
    marks = {0: Mark("n", 0, 0.0, 0.0, 0), 1: Mark("d", 100, 20.0, 1.0, 1_000_000_000,
                                                     sampler_ticks=2),
             2: Mark("n", 190, 40.0, 3.0, 3_000_000_000)}
    samples = [100_000_000, 100_000_000, 50_000_000, 50_000_000,  # block 0
               900_000_000, 900_000_000, 100_000_000, 100_000_000,  # block 1: switch is slow
               100_000_000] * 1 + [0] * 3
    blocks = blocks_of(samples, marks, block=4, n_gen=10, skip=2)
    assert [b.index for b in blocks] == [0, 1]  # block 2 has no mark after it
    assert blocks[0].tps == pytest.approx(20 / 0.1)
    assert blocks[0].sched_tps == pytest.approx(40 / 1.0)
    assert blocks[0].steal_share == pytest.approx(0.2)
    assert blocks[1].tps == pytest.approx(20 / 0.2)
    assert blocks[1].sched_tps == pytest.approx(40 / 2.0)
    assert blocks[1].sampler_cpu == pytest.approx(2 / 90)
    assert blocks[0].sampler_cpu is None


def test_each_on_block_is_divided_by_the_mean_of_its_off_neighbours() -> None:
    def b(index: int, arm: str, tps: float | None) -> Block:
        return Block(index, arm, tps, tps, None, None)

    blocks = [b(0, "n", 100.0), b(1, "d", 99.0), b(2, "n", 98.0), b(3, "z", 90.0),
              b(4, "n", 80.0), b(5, "d", 50.0)]  # block 5 lacks its right neighbour
    assert paired_ratios(blocks) == {"default": [pytest.approx(1.0)],
                                     "placebo": [pytest.approx(90 / 89)]}
    assert paired_ratios([b(0, "n", None), b(1, "d", 5.0), b(2, "n", 5.0)], "sched_tps") == {}


def test_output_sections_and_the_generation_record() -> None:
    out, blocks = split_output("noise\n==out\n{\"n_prompt\": 0, \"n_gen\": 8, "
                               "\"samples_ns\": [5, 6]}\n==blocks\nb 0 n\n")
    assert generation_samples(out) == [5, 6]
    assert blocks == "b 0 n\n"
    assert generation_samples('{"n_prompt": 4, "n_gen": 0, "samples_ns": [1]}') == []


@pytest.mark.skipif(shutil.which("mksh") is None, reason="mksh is not installed")
def test_the_reader_switches_a_real_sampler_on_and_off_under_mksh(tmp_path: Path) -> None:
    engine = tmp_path / "llama-bench"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    launch = Launch(argv=[str(engine), "-p", "32", "-n", "512", "-r", "1", "-o", "jsonl"],
                    rates=Rates())
    arms = block_arms(2)  # n d n z n, and one closing block
    workdir = tmp_path / "w"
    text = device_script(launch, arms, block=5, n_gen=8, workdir=str(workdir))
    done = subprocess.run(["mksh", "-c", text], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    out, marks_text = split_output(done.stdout)
    assert generation_samples(out) == [40_000_000] * 30
    marks = parse_marks(marks_text)
    assert [marks[i].arm for i in range(6)] == ["n", "d", "n", "z", "n", "n"]
    assert all(m.uptime_s is not None and m.sched_ns for m in marks.values())
    assert marks[1].sampler_ticks is not None and marks[3].sampler_ticks is None
    # the sampler ran in its own folder for the "d" block only, and wrote samples there
    assert sorted(p.name for p in workdir.iterdir() if p.is_dir()) == ["b1"]
    # its FIFO made before the engine started (the reader forks nothing but the sampler)
    assert (workdir / "b1" / "nap").is_fifo()
    assert "mkfifo" not in text.split("2>&1 > out | {", 1)[1]
    lines = (workdir / "b1" / "smp").read_text().splitlines()
    assert any(line.startswith("m ") for line in lines)
    blocks = blocks_of(generation_samples(out), marks, 5, 8)
    assert [b.index for b in blocks] == [0, 1, 2, 3, 4]
    assert blocks[0].tps == pytest.approx(8 / 0.04)
    assert set(paired_ratios(blocks)) == {"default", "placebo"}
    json.dumps([b.__dict__ for b in blocks])  # the record the bench stores
