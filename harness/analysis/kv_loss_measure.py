"""Measuring KV cache quality at depth with llama-cpp-python on this host, cached beside the models.

The text is CPython's own ``pydoc_data.topics`` (the help texts of the language reference, every
topic joined in sorted key order): real English prose and code, about 100k Gemma tokens, and on
every machine that has Python; or a user's own UTF-8 file (``--text FILE``). Its sha256 is part
of every result, since another Python version ships another text.

Each depth is measured at ``positions`` places of the text (``kv_loss.position_offsets``),
place by place: f16 first (its window's logits are the reference, kept for that place only),
then every other KV type at the same place. Memory: Gemma's vocabulary has 262k tokens, so
logits are never kept for the prefix. Each run decodes the first ``depth - 1`` tokens without
outputs, then the window in chunks of ``LOGIT_CHUNK`` tokens with outputs (llama.cpp's output
buffer holds one chunk), copied into one [window, vocab] float32 array. Each KV type decodes its
own prefix: the cache's precision is what is measured. The cache is a full-size one
(``swa_full``) so the window can be removed again (``llama_memory_seq_rm``) and the greedy
generation continues the text from the depth itself. Flash attention is on for every KV type
(llama.cpp needs it for a quantised V), f16 included, so the reference differs from the others
by the cache's precision only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.analysis.kv_loss import (
    DEFAULT_POSITIONS,
    KV_QUALITY_FILE,
    LOOP_NGRAM,
    REFERENCE_KV,
    SCHEMA_VERSION,
    Continuation,
    EngineBuild,
    KvCell,
    KvType,
    TextRepetition,
    cell_key,
    check_context,
    check_depths,
    position_offsets,
    position_tokens,
    repetition_figures,
    rotation_enabled,
    text_repetition,
    window_stats,
)
from harness.analysis.repetition import longest_loop, repeated_ngram_share
from harness.artifacts.gguf_info import file_sha256, read_model_info
from harness.errors import ConfigError, ModelError

TEXT_NAME = "pydoc-topics"
LOGIT_CHUNK = 64
BATCH = 512
Progress = Callable[[str], None]


def pydoc_text() -> str:
    """CPython's pydoc topics, joined in sorted key order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip() for key in sorted(topics)) + "\n"


def text_label(text: str, name: str = TEXT_NAME) -> str:
    return f"{name}@{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def read_text(path: Path | None) -> tuple[str, str]:
    """(text, label) of ``--text FILE`` (UTF-8), or of the pydoc topics when None; a
    ConfigError naming ``--text`` for a file that is absent, unreadable, not UTF-8 or empty."""
    if path is None:
        text = pydoc_text()
        return text, text_label(text)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"--text {path}: not UTF-8 text (byte {error.start}); give a UTF-8 "
                          "text file of your domain") from None
    except OSError as error:
        raise ConfigError(f"--text {path}: cannot read it ({error.strerror or error}); give a "
                          "readable UTF-8 text file") from None
    if not text.strip():
        raise ConfigError(f"--text {path}: the file is empty; give a long text of your domain "
                          "(depth + positions x window tokens at least)")
    return text, text_label(text, path.name)


def engine_build(environ: Any = None) -> EngineBuild:
    """llama-cpp-python's version, the llama.cpp commit it vendors (when the harness extracted
    that source: ``harness-source.json``), its CPU features, and the rotation setting."""
    try:
        import llama_cpp
    except ImportError as error:
        raise ConfigError("harness quality needs llama-cpp-python (pip install "
                          "llama-cpp-python)") from error
    from harness.artifacts.llama_source import cache_root, read_source_info

    version = str(llama_cpp.__version__)
    info = read_source_info(cache_root() / "src" / f"llama.cpp-{version}")
    commit = info.commit if info is not None and info.version == version else None
    system = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return EngineBuild(version, commit, system,
                       rotation_enabled(os.environ if environ is None else environ))


@dataclass(frozen=True)
class CellRun:
    """What one (weights, KV type, depth) decode produced."""

    logits: NDArray[np.float32]  # [window, vocab]: row i predicts token depth + i
    generated: tuple[int, ...]


#: (model, tokens, depth, window, gen_tokens, kv) -> CellRun
Runner = Callable[[Path, Sequence[int], int, int, int, KvType], CellRun]


def _ggml_type(llama_cpp: Any, name: str) -> int:
    value = getattr(llama_cpp, f"GGML_TYPE_{name.upper()}", None)
    if value is None:
        raise ConfigError(f"--kv {name}: this llama-cpp-python has no KV cache type {name}")
    return int(value)


class _Decoder:
    """One llama_batch over one context: decode token runs, with outputs or without."""

    def __init__(self, llama_cpp: Any, ctx: Any, size: int) -> None:
        self.lib, self.ctx, self.size = llama_cpp, ctx, size
        self.batch = llama_cpp.llama_batch_init(size, 0, 1)

    def decode(self, tokens: Sequence[int], start: int, outputs: bool) -> None:
        for offset in range(0, len(tokens), self.size):
            part = tokens[offset:offset + self.size]
            self.batch.n_tokens = len(part)
            for i, token in enumerate(part):
                self.batch.token[i] = token
                self.batch.pos[i] = start + offset + i
                self.batch.n_seq_id[i] = 1
                self.batch.seq_id[i][0] = 0
                self.batch.logits[i] = outputs
            code = self.lib.llama_decode(self.ctx, self.batch)
            if code != 0:
                raise ModelError(f"llama_decode failed with code {code} at position "
                                 f"{start + offset}")

    def logits(self, index: int, vocab: int) -> NDArray[np.float32]:
        ptr = self.lib.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(vocab,))

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)


def llama_cell(path: Path, tokens: Sequence[int], depth: int, window: int, gen_tokens: int,
               kv: KvType) -> CellRun:
    """Decode one cell with llama-cpp-python (see the module docstring for the how)."""
    import llama_cpp
    from llama_cpp import Llama

    n_ctx = depth + max(window, gen_tokens)
    llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=BATCH, n_ubatch=BATCH,
                type_k=_ggml_type(llama_cpp, kv.k), type_v=_ggml_type(llama_cpp, kv.v),
                flash_attn=True, swa_full=True, logits_all=False, verbose=False, seed=0,
                n_threads=min(4, os.cpu_count() or 1))
    decoder = _Decoder(llama_cpp, llm.ctx, BATCH)
    try:
        vocab = llm.n_vocab()
        decoder.decode(tokens[:depth - 1], 0, outputs=False)
        logits = np.empty((window, vocab), dtype=np.float32)
        for first in range(0, window, LOGIT_CHUNK):
            count = min(LOGIT_CHUNK, window - first)
            decoder.decode(tokens[depth - 1 + first:depth - 1 + first + count],
                           depth - 1 + first, outputs=True)
            for i in range(count):
                logits[first + i] = decoder.logits(i, vocab)
        memory = llama_cpp.llama_get_memory(llm.ctx)
        llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)  # back to the depth itself
        vocab_p = llama_cpp.llama_model_get_vocab(llm.model)
        generated = [int(logits[0].argmax())]
        while len(generated) < gen_tokens and not llama_cpp.llama_vocab_is_eog(
                vocab_p, generated[-1]):
            decoder.decode([generated[-1]], depth + len(generated) - 1, outputs=True)
            generated.append(int(decoder.logits(0, vocab).argmax()))
        return CellRun(logits, tuple(generated))
    finally:
        decoder.close()
        llm.close()


def tokenize(path: Path, text: str) -> list[int]:
    from harness.analysis.quality import tokenize as quality_tokenize

    return quality_tokenize(path, text)


@dataclass
class _Pooled:
    """One KV type's figures gathered place by place."""

    kl: list[NDArray[np.float64]]
    agree: list[NDArray[np.bool_]]
    nll: list[NDArray[np.float64]]
    runs: list[Continuation]


def measure_cells(path: Path, quant: str, sha: str, tokens: Sequence[int], kvs: Sequence[KvType],
                  depth: int, *, window: int, gen_tokens: int, text: str, build: EngineBuild,
                  positions: int = 1, ladder_shas: Sequence[str] = (),
                  run: Runner = llama_cell, progress: Progress | None = None) -> list[KvCell]:
    """f16 KV and every KV type of ``kvs`` at one depth with one weight file, each measured at
    ``positions`` places of the text; f16 first (returned too, whether asked for or not: it is
    the baseline of the loop figures), then the others in order."""
    reference = KvType(REFERENCE_KV, REFERENCE_KV)
    order = [reference, *(kv for kv in kvs if kv != reference)]
    offsets = position_offsets(len(tokens), depth, window, positions)
    pooled = {kv: _Pooled([], [], [], []) for kv in order}
    for place, offset in enumerate(offsets, 1):
        view = position_tokens(tokens, offset)
        targets = view[depth:depth + window]
        ref: NDArray[np.float32] | None = None
        for kv in order:
            if progress is not None:
                progress(f"{quant} KV {kv.label} at depth {depth}, place {place} of "
                         f"{len(offsets)} (text token {offset + depth}): decoding "
                         f"{depth + window} tokens, generating {gen_tokens}")
            result = run(path, view, depth, window, gen_tokens, kv)
            if ref is None:
                ref = result.logits
            stats = window_stats(ref, result.logits, targets)
            generated = list(result.generated)
            gathered = pooled[kv]
            gathered.kl.append(stats.kl)
            gathered.agree.append(stats.agree)
            gathered.nll.append(stats.nll)
            gathered.runs.append(Continuation(offset, len(generated),
                                              repeated_ngram_share(generated, LOOP_NGRAM),
                                              longest_loop(generated)))
            del result
    cells = []
    for kv, gathered in pooled.items():
        kl = np.concatenate(gathered.kl)
        nll = np.concatenate(gathered.nll)
        repeated, loop, generated_tokens = repetition_figures(gathered.runs)
        cells.append(KvCell(
            quant=quant, sha256=sha, kv=kv.label, type_k=kv.k, type_v=kv.v, depth=depth,
            window=window, kl=float(kl.mean()), kl_max=float(kl.max()),
            top1=float(np.concatenate(gathered.agree).mean()), ppl=float(np.exp(nll.mean())),
            gen_tokens=generated_tokens, repeated_4gram=repeated, longest_loop=loop, text=text,
            build=build, measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
            ladder_shas=tuple(ladder_shas), continuations=tuple(gathered.runs)))
    return cells


def read_cache(path: Path) -> dict[str, KvCell]:
    """key -> cell from a kv_quality.json (an absent file is empty; a broken one a ModelError)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        version = data.get("schema_version", 1)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ValueError(f"schema {version} is from a newer harness (this one reads up to "
                             f"{SCHEMA_VERSION})")
        return {key: KvCell.from_json(cell) for key, cell in data.get("cells", {}).items()}
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ModelError(f"{path}: not a readable KV quality file ({error}); move it away and "
                         "run `harness quality --kv ...` again") from error


def write_cache(path: Path, cells: dict[str, KvCell]) -> None:
    """Every cell, whatever its build: results of other builds are kept, beside, not merged."""
    document = {"schema_version": SCHEMA_VERSION,
                "cells": {key: cell.to_json() for key, cell in sorted(cells.items())}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class KvQualityResult:
    cells: tuple[KvCell, ...]
    path: Path
    measured: int  # cells measured now (the rest came from the cache)
    text: str
    text_tokens: int
    #: (quant, depth) -> the f16 cell measured at the same places: the loop figures' baseline
    baselines: dict[tuple[str, int], KvCell] = field(default_factory=dict)
    #: depth -> the start offsets of its places in the text
    offsets: dict[int, tuple[int, ...]] = field(default_factory=dict)
    text_repetition: TextRepetition | None = None


@dataclass(frozen=True)
class KvRequest:
    ladder: str
    quants: tuple[str, ...]
    kvs: tuple[KvType, ...]
    depths: tuple[int, ...]
    window: int
    gen_tokens: int
    positions: int = DEFAULT_POSITIONS
    text_file: Path | None = None  # None: CPython's pydoc topics


def ensure_kv_quality(request: KvRequest, *, cache_dir: Path | None = None,
                      run: Runner = llama_cell, build: EngineBuild | None = None,
                      progress: Progress | None = None) -> KvQualityResult:
    """The requested cells, from ``kv_quality.json`` beside the models when cached for this
    build, rotation, text and settings; else measured (per weight file and depth, written as
    they finish, the f16 baseline with them). Every input is checked before anything is
    measured or written."""
    from harness.artifacts.testmodels import REAL_LADDERS, ensure_ladder, ladder_dir

    if request.ladder not in REAL_LADDERS:
        raise ConfigError(f"--kv needs a real model ladder (--ladder "
                          f"{', '.join(sorted(REAL_LADDERS))}): a synthetic one reads no text")
    if request.gen_tokens < 1:
        raise ConfigError(f"--gen-tokens {request.gen_tokens}: generate at least 1 token, "
                          "e.g. --gen-tokens 256")
    paths = ensure_ladder(request.ladder, cache_dir, progress)
    missing = [q for q in request.quants if q not in paths]
    if missing:
        raise ConfigError(f"--quant {missing[0]}: the {request.ladder} ladder has "
                          f"{', '.join(paths)}")
    text, label = read_text(request.text_file)
    tokens = tokenize(paths[request.quants[0]], text)
    where = f"--text {request.text_file}" if request.text_file else f"the text {label}"
    check_depths(request.depths, len(tokens), request.window, where, request.positions)
    check_context(request.depths, max(request.window, request.gen_tokens),
                  read_model_info(paths[request.quants[0]]).context_length)
    build = build or engine_build()
    target = ladder_dir(request.ladder, cache_dir) / KV_QUALITY_FILE
    cache = read_cache(target)
    shas = {q: file_sha256(p) for q, p in paths.items()}
    text_sha = hashlib.sha256(text.encode()).hexdigest()
    reference = KvType(REFERENCE_KV, REFERENCE_KV)
    every = (reference, *(kv for kv in request.kvs if kv != reference))
    out: list[KvCell] = []
    baselines: dict[tuple[str, int], KvCell] = {}
    measured = 0
    for quant in request.quants:
        for depth in request.depths:
            keys = {kv: cell_key(shas[quant], kv, depth, request.window, request.gen_tokens,
                                 text_sha, build, request.positions) for kv in every}
            if not all(k in cache for k in keys.values()):
                cells = measure_cells(paths[quant], quant, shas[quant], tokens, request.kvs,
                                      depth, window=request.window,
                                      gen_tokens=request.gen_tokens, text=label, build=build,
                                      positions=request.positions,
                                      ladder_shas=sorted(shas.values()), run=run,
                                      progress=progress)
                fresh = {KvType(c.type_k, c.type_v): c for c in cells}
                measured += sum(kv in fresh for kv in request.kvs)
                cache.update({keys[kv]: cell for kv, cell in fresh.items()})
                write_cache(target, cache)
            out.extend(cache[keys[kv]] for kv in request.kvs)
            baselines[(quant, depth)] = cache[keys[reference]]
    offsets = {d: position_offsets(len(tokens), d, request.window, request.positions)
               for d in request.depths}
    return KvQualityResult(tuple(out), target, measured, label, len(tokens), baselines, offsets,
                           text_repetition(tokens, request.gen_tokens))


def cached_kv_cells(cache_dir: Path | None = None) -> tuple[KvCell, ...]:
    """Every KV cell cached under the models folder, of every ladder and build."""
    from harness.artifacts.ladder import default_cache_root

    root = cache_dir if cache_dir is not None else default_cache_root()
    cells: list[KvCell] = []
    for path in sorted((root / "models").glob(f"*/{KV_QUALITY_FILE}")):
        try:
            cells.extend(read_cache(path).values())
        except ModelError as error:  # a reader goes on without it, and says so
            print(f"warning: KV quality left out: {error}", file=sys.stderr)
    return tuple(cells)
