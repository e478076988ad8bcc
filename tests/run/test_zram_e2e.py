"""Paging is storage, not swap (issue 37, item 3): on a phone with zram, a page swapped back in
is a block read and a major fault like a weight read from the model file. The small-RAM phone
(storage at 100 MB/s) leaving the engine 96 MB, with 256 MB of zram of its own: bench's F16
(151 MB) read into memory swaps instead of being killed, and is not labelled paging; mapped, its
weights still page from storage, and it is.

These need root, cgroup v1 memory with swap accounting and the zram module (the host this
project is built on has them); elsewhere they skip, naming what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.paging_measure import PAGING_SHARE
from harness.run.runner import RunOptions, execute
from harness.virtual import cgroups, reclaim, zram

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "devices" / "virtual" / "small-ram.yaml"
ZRAM_MB = 256
# the engine's limit: below bench F16's matrices (126 MB of its 151; the other 25 MB are token
# embeddings a decode barely touches), so a read-in engine swaps some of them every token
LIMIT_MB = 96

MATRIX = """
name: zram
axes:
  build: [host-release]
  model: [bench]
  quant: [F16]
  n_ctx: [256]
  kv: [f16]
  threads: [1]
  load_mode: [mmap, none]
  cache: [cold]
  n_batch: [64]
  n_ubatch: [64]
models:
  bench: {ladder: bench}
workload: {n_prompt: 16, n_gen: 16}
repetitions: 1
cooldown: {max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}
timeout: {trial_s: 240}
output_check: false   # what is asked here is where the reads came from, not the tokens
"""


def _swaps() -> list[str]:
    return [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:]]


def _zram_or_skip(path: Path, memory_model: str) -> None:
    why = zram.probe()
    if memory_model == "cgroup":
        why = why or cgroups.probe(path)
        if why is None and not (cgroups.controller_dirs()["memory"] / cgroups.MEMSW_LIMIT
                                ).exists():
            why = "the kernel has no swap accounting (memory.memsw)"
    else:
        why = why or reclaim.capable()
    if why is not None:
        pytest.skip(f"no zram phone with the {memory_model} model here: {why}")


@pytest.mark.parametrize("memory_model", ["cgroup", "simulated"])
def test_swap_ins_are_not_paging_and_mapped_weights_still_are(
        virtual_phones: Any, tmp_path: Path, host_build: Build, bench_ladder: Any,
        memory_model: str) -> None:
    """The simulated model (cgroup v2 hosts) pages the engine's anonymous memory out to the
    phone's zram itself, after its file pages, so the same cells tell the same story."""
    _zram_or_skip(tmp_path, memory_model)
    profile = yaml.safe_load(SMALL.read_text())
    profile.update(name="small-ram-zram", zram_mb=ZRAM_MB)
    (tmp_path / "small-ram-zram.yaml").write_text(yaml.safe_dump(profile))
    before = set(_swaps())
    (phone,) = virtual_phones(1, profile=str(tmp_path / "small-ram-zram.yaml"), ram_mb=LIMIT_MB,
                              memory_model=memory_model)
    assert phone.info.memory_model == memory_model
    own = set(_swaps()) - before
    assert len(own) == 1 and next(iter(own)).startswith("/dev/zram"), own  # the phone's zram

    matrix = tmp_path / "zram.yaml"
    matrix.write_text(MATRIX)
    execute(matrix, [get_device(phone.serial)],
            RunOptions(results=tmp_path / "r", builds=host_build.path.parent, reserve_bytes=0,
                       no_skip=True))
    trials = store.read_table(tmp_path / "r", "trials").set_index("load_mode")
    size = int(trials["model_file_bytes"].iloc[0])
    assert size > LIMIT_MB * 2**20  # bigger than what the phone leaves the engine

    read_in = trials.loc["none"]
    # without zram this cell is killed (test_bigger_than_ram_e2e); with it, it swaps
    assert read_in["outcome"] == "ok", read_in[["outcome", "error"]]
    # /proc/PID/io alone would call it paging: it read more than the label's share per token...
    assert read_in["read_bytes_per_token"] >= PAGING_SHARE * size, read_in
    # ...and those reads were pages coming back from zram, so it is not paging
    assert read_in["swap_in_bytes_per_token"] >= 0.9 * read_in["read_bytes_per_token"], read_in
    assert read_in["paging"] == False  # noqa: E712 - a stored bool, not None

    mapped = trials.loc["mmap"]
    assert mapped["outcome"] == "ok", mapped[["outcome", "error"]]
    # its reads are the model file's, not swap-ins, and well clear of the label's threshold.
    # With cgroup the kernel's LRU drops a fifth of the file or more every token (measured 83
    # MB of 151). The simulated model pages out, once per guard period (20 ms), what is over
    # the limit and a sixteenth more (about 25 MB here), so its reads per token follow how many
    # tokens the host decodes in 20 ms: 55 MB at a slower decode, 28 MB at 42 tokens/s and 22
    # MB on a loaded host (issue 51's fresh runs); still five times the label's threshold.
    assert mapped["swap_in_bytes_per_token"] <= 0.1 * mapped["read_bytes_per_token"], mapped
    file_reads = mapped["read_bytes_per_token"] - mapped["swap_in_bytes_per_token"]
    margin = 10 if memory_model == "cgroup" else 5
    assert file_reads >= margin * PAGING_SHARE * size, mapped
    assert mapped["paging"] == True  # noqa: E712


def test_a_zram_device_is_made_swap_and_removed(tmp_path: Path) -> None:
    why = zram.probe()
    if why is not None:
        pytest.skip(f"no zram here: {why}")
    swap = zram.make(16 * 2**20, "test")
    try:
        assert swap.device in _swaps()
        assert Path(f"/sys/block/zram{swap.index}/disksize").read_text().strip() == str(16 << 20)
    finally:
        zram.remove(swap)
    assert swap.device not in _swaps()
    assert not Path(f"/sys/block/zram{swap.index}").exists()
