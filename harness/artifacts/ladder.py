"""Quantise a GGUF model into the ladder's types with llama-cpp-python's own quantiser.

The harness measures how an engine behaves across quant levels, so the test models must be
quantised by llama.cpp itself (the same code a user's ``llama-quantize`` runs), not by a Python
re-implementation. Every file is written under a temporary name and renamed into place, so an
interrupted run never leaves a half-written file that looks finished.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.artifacts.hashing import file_sha256
from harness.errors import ModelError

# In the order of the ladder: from the unquantised base down to the smallest K-quant.
LADDER_QUANTS: tuple[str, ...] = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K")

# The ladders the harness makes: synthetic ones (harness.artifacts.testmodels), then real ones
# from PyPI (harness.artifacts.realmodel). Listed here, beside the quants, so that light modules
# (harness.matrix) can name them without importing numpy and gguf.
SYNTHETIC_SIZES: tuple[str, ...] = ("tiny", "bench", "moe")
REAL_LADDERS: tuple[str, ...] = ("gemma3-270m",)
LADDER_SIZES: tuple[str, ...] = SYNTHETIC_SIZES + REAL_LADDERS
# Ladders with fewer rungs than LADDER_QUANTS. The MoE model is there to show mmap paging of
# experts, which needs an unquantised, an 8-bit and a 4-bit file, not seven quantisations of a
# quarter-GB model (each costs CI time).
# The dense synthetic ladders add Q4_0 after them: the type GPU backends have their own fast
# kernels for (Adreno's OpenCL, Vulkan), beside Q8_0 (matrices/gpu.yaml).
_LADDER_RUNGS: dict[str, tuple[str, ...]] = {
    "moe": ("F16", "Q8_0", "Q4_K_M"),
    "tiny": (*LADDER_QUANTS, "Q4_0"),
    "bench": (*LADDER_QUANTS, "Q4_0"),
}


def default_cache_root() -> Path:
    """Where made files are cached: $HARNESS_CACHE, else ``~/.cache/harness``."""
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness")


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold a lock on the ladder directory so concurrent sessions do not quantise twice."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ladder_quants(size: str) -> tuple[str, ...]:
    """The quants of the ``size`` ladder, in ladder order (LADDER_QUANTS unless it has fewer)."""
    return _LADDER_RUNGS.get(size, LADDER_QUANTS)


# general.file_type of each rung (llama.h's LLAMA_FTYPE_MOSTLY_* and gguf's LlamaFileType).
FILE_TYPES: dict[str, int] = {
    "F16": 1,
    "Q8_0": 7,
    "Q6_K": 18,
    "Q5_K_M": 17,
    "Q4_K_M": 15,
    "Q3_K_M": 12,
    "Q2_K": 10,
    "Q4_0": 2,
}

# The ggml tensor type of the bulk of the matrices (ffn_gate/ffn_up) in each rung. The *_M mixes
# deliberately give a few tensors (attn_v, ffn_down, output) more bits; these two never do.
MAIN_TENSOR_TYPES: dict[str, str] = {
    "F16": "F16",
    "Q8_0": "Q8_0",
    "Q6_K": "Q6_K",
    "Q5_K_M": "Q5_K",
    "Q4_K_M": "Q4_K",
    "Q3_K_M": "Q3_K",
    "Q2_K": "Q2_K",
    "Q4_0": "Q4_0",
}


def llama_cpp_python_version() -> str:
    """The installed llama-cpp-python version (part of the cache key: its quantiser may change)."""
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "absent"


@contextmanager
def atomic_output(dest: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it to ``dest`` only if the block succeeds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _quiet_llama_log() -> Iterator[list[str]]:
    """Keep llama.cpp's quantisation chatter off the terminal; yield a list that receives it.

    Its per-tensor lines go partly through llama-cpp-python's logger (kept to errors) and partly
    straight to the C streams (a "falling back to q4_0" warning per tensor whose rows do not fit a
    K-quant: hundreds for a real model), so file descriptors 1 and 2 point at a temporary file
    for the call. What was printed is handed back, for the error message if the call fails.
    """
    import sys
    import tempfile

    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.ERROR)
    captured: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            logger.setLevel(level)
            sink.seek(0)
            captured.extend(sink.read().decode(errors="replace").splitlines()[-5:])


def quantize(src: Path, dest: Path, quant: str, nthread: int = 0,
             allow_requantize: bool = False) -> None:
    """Quantise ``src`` (an F16/F32 GGUF) into ``dest`` as ``quant``, atomically.

    ``nthread`` 0 lets llama.cpp use every core. ``allow_requantize`` lets llama.cpp read an
    already quantised source (dequantising it first), e.g. to make an F16 from a Q4_K_M. Raises
    ModelError if llama-cpp-python is missing or its quantiser reports a failure.
    """
    if quant not in FILE_TYPES:
        allowed = ", ".join(LADDER_QUANTS)
        raise ModelError(f"unknown quant {quant!r}; use one of {allowed}")
    try:
        import llama_cpp
    except ImportError as error:
        raise ModelError(
            "llama-cpp-python is not installed; the quant ladder needs it (docs/development.md)"
        ) from error
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.nthread = nthread
    params.allow_requantize = allow_requantize
    with atomic_output(dest) as tmp:
        with _quiet_llama_log() as said:
            status = llama_cpp.llama_model_quantize(
                str(src).encode(), str(tmp).encode(), ctypes.byref(params)
            )
        if status != 0:
            last = said[-1].strip() if said else "no message"
            raise ModelError(f"{src}: llama.cpp failed to quantise it to {quant} (status "
                             f"{status}: {last})")


def quantize_ladder(
    base: Path,
    targets: dict[str, Path],
    progress: Callable[[str], None] | None = None,
) -> None:
    """Make every missing file of ``targets`` (quant -> path) from ``base``; keep existing ones."""
    for quant, path in targets.items():
        if path.exists():
            continue
        if progress is not None:
            progress(f"quantising {path.name}")
        quantize(base, path, quant)


@dataclass(frozen=True)
class LadderFile:
    """One rung of a ladder as a report shows it: which quant, where, how big, which bytes."""

    quant: str
    path: Path
    size_bytes: int
    sha256: str


def describe_ladder(paths: dict[str, Path]) -> list[LadderFile]:
    """Size and sha256 of every file of a ladder (quant -> path), in the given order."""
    return [
        LadderFile(quant, path, path.stat().st_size, file_sha256(path))
        for quant, path in paths.items()
    ]
