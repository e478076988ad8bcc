"""Host builds of the vendored llama.cpp with small source edits: deliberately broken builds.

A test that must show the harness catching a wrong engine (the output check) needs a build that
is fast and wrong. ``ensure_patched_host_build`` copies the vendored tree, applies exact text
replacements (each must match once, so a changed upstream file fails loudly instead of building
an unpatched tree), and compiles it with host-release's flags. Like the other host variants it is
cached by content: the key covers the source version, the cmake flags, the machine, the targets
and the edits, so a fresh machine compiles it once (a full build, about 5 minutes on 2 cores)
and later sessions only copy it. Patched trees and builds live in the cache, never in the repo.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.artifacts.builds import Build, copy_build
from harness.artifacts.cmake_build import (
    DEFAULT_TARGETS,
    HOST_VARIANTS,
    Progress,
    build_llama_cpp,
    cached_build,
    cmake_defines,
    generator_digest,
)
from harness.artifacts.llama_source import (
    LLAMA_CPP_PYTHON_VERSION,
    cache_root,
    ensure_llama_source,
)
from harness.errors import BuildError


@dataclass(frozen=True)
class SourceEdit:
    """Replace ``old`` by ``new`` in ``path`` (relative to the llama.cpp tree); ``old`` must occur
    exactly once."""

    path: str
    old: str
    new: str


def patched_key(variant: str, edits: Sequence[SourceEdit]) -> str:
    """Cache key: source version + host-release's cmake flags + machine + targets + the edits."""
    defines = cmake_defines("host", None, HOST_VARIANTS["host-release"])
    text = json.dumps(
        [LLAMA_CPP_PYTHON_VERSION, defines, os.uname().machine, DEFAULT_TARGETS, variant,
         [asdict(edit) for edit in edits], generator_digest()],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def apply_edits(text_by_path: dict[str, str], edits: Sequence[SourceEdit]) -> dict[str, str]:
    """The edited texts (pure): a one-line BuildError when an ``old`` is absent or ambiguous."""
    out = dict(text_by_path)
    for edit in edits:
        text = out[edit.path]
        count = text.count(edit.old)
        if count != 1:
            raise BuildError(f"{edit.path}: the text to replace occurs {count} times (want 1); "
                             "the vendored llama.cpp changed, update the edit")
        out[edit.path] = text.replace(edit.old, edit.new)
    return out


def patched_source(variant: str, edits: Sequence[SourceEdit], cache: Path) -> Path:
    """``$HARNESS_CACHE/src/patched/<variant>-<key>``: the vendored tree with the edits applied,
    made in a temporary folder and renamed into place (a crash never leaves half a tree)."""
    target = cache / "src" / "patched" / f"{variant}-{patched_key(variant, edits)}"
    if (target / "CMakeLists.txt").is_file():
        return target
    vendored = ensure_llama_source(root=cache / "src")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".patch-", dir=target.parent))
    try:
        tree = tmp / "llama.cpp"
        shutil.copytree(vendored, tree, symlinks=True, ignore=shutil.ignore_patterns("*.gguf"))
        paths = sorted({edit.path for edit in edits})
        texts = apply_edits({p: (tree / p).read_text() for p in paths}, edits)
        for path, text in texts.items():
            (tree / path).write_text(text)
        os.replace(tree, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_patched_host_build(
    variant: str, edits: Sequence[SourceEdit], root: Path, *, cache: Path | None = None,
    progress: Progress | None = None,
) -> Build:
    """A host-release build of the edited tree, compiled once per key, copied to
    ``root/variant``."""
    if not edits:
        raise BuildError(f"patched build {variant!r}: no source edits given")
    cache = cache or cache_root()
    cached_root = cache / "builds"
    cached_name = f"{variant}-{patched_key(variant, edits)}"

    def build() -> None:
        build_llama_cpp(patched_source(variant, edits, cache), cached_root, cached_name,
                        abi="host", extra=HOST_VARIANTS["host-release"], progress=progress,
                        nice=True, replace=True, cache=cache)

    return copy_build(cached_build(cached_root, cached_name, build), root, variant)
