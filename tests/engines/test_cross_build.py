"""The arm64 build made without an NDK: a static aarch64 llama-bench that runs under qemu-aarch64,
and the CPU features every cached test build's manifest records."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from harness.artifacts.builds import Build, file_sha256
from harness.cell import Cell
from harness.engines.llama_bench import LlamaBench, parse_output

DATA = Path(__file__).parent / "data"
EM_AARCH64 = 183
PT_DYNAMIC, PT_INTERP = 2, 3
X86_RELEASE = ["sse42", "f16c", "fma", "bmi2", "avx", "avx2"]

CELL = Cell(
    build="arm64-release", model="tiny", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
    threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=512, n_ubatch=256,
    n_prompt=16, n_gen=4, n_depth=0, repetitions=1,
)


@dataclasses.dataclass(frozen=True)
class Elf:
    machine: int
    segments: tuple[int, ...]  # program header types


def read_elf(path: Path) -> Elf:
    """The few header fields that say which CPU a binary is for and whether it is static."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", f"{path}: not an ELF file"
    assert data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit little-endian ELF"
    machine = struct.unpack_from("<H", data, 18)[0]
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    types = tuple(struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum))
    return Elf(machine, types)


@pytest.mark.slow
def test_arm64_build_is_a_static_aarch64_elf_that_runs_under_qemu(
    arm64_build: Build, tiny_ladder: dict[str, Path], tmp_path: Path
) -> None:
    qemu = shutil.which("qemu-aarch64")
    assert qemu, "qemu-aarch64 is missing: install Debian's qemu-user"
    m = arm64_build.manifest
    assert (m.name, m.abi, m.engine) == ("arm64-release", "arm64-v8a", "llama.cpp")
    assert m.version and m.commit
    assert "-DCMAKE_EXE_LINKER_FLAGS=-static" in m.cmake_flags
    # static: no lib/; harness-generate is the output check's generator
    assert [f.path for f in m.files] == ["bin/harness-generate", "bin/llama-bench"]
    for entry in m.files:
        assert file_sha256(arm64_build.path / entry.path) == entry.sha256

    elf = read_elf(arm64_build.binary())
    assert elf.machine == EM_AARCH64
    assert PT_INTERP not in elf.segments and PT_DYNAMIC not in elf.segments  # static

    root = tmp_path / "phone-root"  # -L: the guest's absolute paths look here first
    root.mkdir()
    engine = LlamaBench()
    argv = [qemu, "-L", str(root),
            *engine.argv(CELL, str(arm64_build.binary()), str(tiny_ladder["Q4_K_M"]))]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    records = parse_output(result.stdout)
    assert [(r.n_prompt, r.n_gen) for r in records] == [(16, 0), (0, 4)]
    assert all(r.avg_ts and r.avg_ts > 0 for r in records)
    assert records[0].build_commit == (m.commit or "")[:7]
    assert records[0].model_filename == str(tiny_ladder["Q4_K_M"])
    measurements = engine.measure(engine.parse(result.stdout))
    assert len(measurements) == 1 and measurements[0].prompt_tps and measurements[0].gen_tps
    # the same JSONL keys as a host run of llama-bench
    host_keys = set(json.loads((DATA / "llama_bench_host.jsonl").read_text().splitlines()[0]))
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            assert set(json.loads(line)) == host_keys


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "arch", "enabled", "flags"),
    [
        ("host_build", "x86_64", X86_RELEASE,
         ["-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2"]),
        ("slow_build", "x86_64", ["sse42"], ["-msse4.2"]),
        ("arm64_build", "aarch64", ["dotprod", "fp16"], ["-march=armv8.2-a+dotprod+fp16"]),
    ],
)
def test_test_builds_record_their_cpu_features(
    request: pytest.FixtureRequest, fixture: str, arch: str, enabled: list[str], flags: list[str]
) -> None:
    build: Build = request.getfixturevalue(fixture)
    cpu = build.manifest.cpu
    assert cpu is not None
    if arch == "x86_64" and cpu.arch != "x86_64":
        pytest.skip(f"host builds of this machine are {cpu.arch}")
    assert (cpu.arch, cpu.enabled, list(cpu.arch_flags), cpu.kleidiai) == (
        arch, enabled, flags, False)
    saved = json.loads((build.path / "manifest.json").read_text())
    assert saved["format"] == 3 and saved["cpu"] == cpu.to_dict() and saved["backends"] == []
