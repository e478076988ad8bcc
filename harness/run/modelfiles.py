"""A model in an engine's own format: the folder holding its file, pushed whole.

MNN's ``config.json`` sits with ``llm.mnn``, its weights and tokenizer; an ExecuTorch ``.pte``
with its tokenizer; ONNX Runtime GenAI's ``genai_config.json`` with the graph and its data. The
harness pushes every regular file of that folder (not its subfolders) under one
content-addressed folder on the phone, named by the digest of all of them, and gives the engine
the path of the named file in it. A model file of the GGUF kind stays one file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.artifacts.hashing import cached_file_sha256
from harness.engines.base import prompt_text
from harness.errors import ConfigError
from harness.run.deploy import DEVICE_ROOT, Artifact

MAX_FILES = 256  # a folder of more is not a model folder (a home directory named by mistake)


@dataclass(frozen=True)
class ModelFolder:
    artifacts: tuple[Artifact, ...]
    remote: str  # the named file on the phone
    sha256: str  # the digest of the folder's files (names and contents)
    size: int  # bytes of all of them


def folder_files(path: Path, where: str, needs: Sequence[str] = ()) -> list[Path]:
    """The files to push with ``path`` (its folder's regular files), checked: ``needs`` are
    files the engine reads beside it (a tokenizer). ``where`` names the matrix key in errors.
    Cheap (no hashing): a run checks every cell's before anything is pushed or stored."""
    if not path.is_file():
        raise ConfigError(f"{where}: {path} is not a file (the engine's model file, in the "
                          "folder to push)")
    folder = path.parent
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if len(files) > MAX_FILES:
        raise ConfigError(f"{where}: {folder} holds {len(files)} files; a model folder holds "
                          f"at most {MAX_FILES} (give the model its own folder)")
    for name in needs:
        if not (folder / name).is_file():
            raise ConfigError(f"{where}: the engine reads {name} beside {path.name}, and "
                              f"{folder} has none")
    return files


def model_folder(path: Path, where: str, needs: Sequence[str] = ()) -> ModelFolder:
    """The artefacts of the folder holding ``path`` (``folder_files``), content-addressed."""
    files = folder_files(path, where, needs)
    folder = path.parent
    shas = [(p.name, cached_file_sha256(p)) for p in files]
    digest = hashlib.sha256("\n".join(f"{n} {s}" for n, s in shas).encode()).hexdigest()
    remote_dir = f"{DEVICE_ROOT}/models/{digest}"
    artifacts = tuple(Artifact(folder / name, sha, f"{remote_dir}/{name}")
                      for name, sha in shas)
    return ModelFolder(artifacts, f"{remote_dir}/{path.name}", digest,
                       sum(p.stat().st_size for p in files))


def prompt_artifact(n_tokens: int, cache: Path) -> Artifact:
    """The prompt file of ``n_tokens`` words (``base.prompt_text``), made once under ``cache``
    and pushed content-addressed: what a generic engine's ``{prompt_file}`` names."""
    text = prompt_text(n_tokens) + "\n"
    sha = hashlib.sha256(text.encode()).hexdigest()
    local = cache / f"prompt-{sha[:16]}.txt"
    if not local.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = local.with_suffix(".part")
        partial.write_text(text)
        partial.replace(local)
    return Artifact(local, sha, f"{DEVICE_ROOT}/prompts/{sha}/prompt.txt")
