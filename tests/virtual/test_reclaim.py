"""The simulated memory model's reclaim: which mappings are clean file pages of the phone's own
files, how a step is cut, and that the kernel really takes them from another process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.virtual import reclaim
from harness.virtual.procs import read_text

MAPS = """\
55d0c0000000-55d0c0100000 r--p 00000000 fe:01 11 /phone/root/data/local/tmp/llama-bench
55d0c0100000-55d0c0200000 r-xp 00100000 fe:01 11 /phone/root/data/local/tmp/llama-bench
55d0c0200000-55d0c0201000 rw-p 00200000 fe:01 11 /phone/root/data/local/tmp/llama-bench
7f0000000000-7f0009000000 r--p 00000000 fe:01 12 /phone/root/data/local/tmp/m y.gguf
7f0010000000-7f0010100000 rw-s 00000000 fe:01 13 /phone/root/data/local/tmp/shared.bin
7f0020000000-7f0020100000 r-xp 00000000 fe:01 14 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0030000000-7f0030100000 r--p 00000000 fe:01 15 /phone/root/data/local/tmp/old (deleted)
7f0040000000-7f0040100000 rw-p 00000000 00:00 0 [heap]
7f0050000000-7f0050100000 r--p 00000000 fe:01 16 /phone/rootless/x
"""


def test_only_clean_mappings_of_the_phone_s_own_files_are_reclaimable() -> None:
    found = reclaim.file_mappings(MAPS, "/phone/root")
    assert [(m.start, m.end, m.path) for m in found] == [
        (0x55d0c0000000, 0x55d0c0100000, "/phone/root/data/local/tmp/llama-bench"),
        (0x55d0c0100000, 0x55d0c0200000, "/phone/root/data/local/tmp/llama-bench"),
        (0x7f0000000000, 0x7f0009000000, "/phone/root/data/local/tmp/m y.gguf")]
    # written pages (data, a shared writable file), the host's libraries, the heap, a deleted
    # file and a folder that only starts like the root are never taken


def test_anonymous_memory_to_swap_is_private_writable_memory_backed_by_no_file() -> None:
    maps = MAPS + ("7f0060000000-7f0064000000 rw-p 00000000 00:00 0 \n"
                   "7f0070000000-7f0070100000 rw-p 00000000 00:00 0 [anon:scudo:primary]\n"
                   "7f0080000000-7f0080100000 rw-s 00000000 00:01 9 /dev/zero (deleted)\n"
                   "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]\n"
                   "7f0090000000-7f0090001000 ---p 00000000 00:00 0 \n")
    assert [(m.start, m.path) for m in reclaim.anon_mappings(maps)] == [
        (0x7f0040000000, "[heap]"), (0x7f0060000000, ""), (0x7f0070000000, "[anon:scudo:primary]")]
    # a file's written pages (the binary's data), shared memory, the stack and guard pages stay
    assert reclaim.status_kb("RssAnon:\t  4096 kB\nVmSwap:\t  12 kB\n", "VmSwap") == 12


def test_a_step_is_cut_across_mappings_in_address_order() -> None:
    maps = [reclaim.Mapping(0x3000, 0x5000, "b"), reclaim.Mapping(0x0, 0x2000, "a")]
    groups = reclaim.chunks(maps, 0x1800)
    assert [[(m.start, m.end) for m in g] for g in groups] == [
        [(0x0, 0x1800)], [(0x1800, 0x2000), (0x3000, 0x4000)], [(0x4000, 0x5000)]]
    assert reclaim.rss_file_kb("Name:\tx\nRssFile:\t  154500 kB\n") == 154500
    assert reclaim.rss_file_kb("Name:\tx\n") is None


@pytest.mark.skipif(reclaim.capable() is not None, reason="needs CAP_SYS_NICE (root)")
def test_another_process_s_mapped_file_pages_are_paged_out(tmp_path: Path) -> None:
    data = tmp_path / "weights.bin"
    data.write_bytes(bytes(range(256)) * (64 * 1024 * 4))  # 64 MiB
    child = subprocess.Popen([sys.executable, "-c", (
        "import mmap, sys\n"
        f"f = open({str(data)!r}, 'rb')\n"
        "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        "s = sum(m[i] for i in range(0, len(m), 4096))\n"
        "print(s, flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline()
        before = reclaim.rss_file_kb(read_text(f"/proc/{child.pid}/status"))
        assert before is not None and before >= 60 * 1024
        freed = reclaim.reclaim([child.pid], str(tmp_path), need_kb=16 * 1024, step_kb=8 * 1024)
        after = reclaim.rss_file_kb(read_text(f"/proc/{child.pid}/status"))
        assert after is not None and 16 * 1024 <= freed == before - after
        assert after >= 30 * 1024  # a step at a time: what was needed went, not the whole file
    finally:
        child.kill()
        child.wait()
