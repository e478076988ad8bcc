"""Quality per quant: how far each rung's next-token distribution is from the ladder's best.

Why KL divergence and top-1 agreement against the highest-precision member (as llama.cpp's own
``llama-perplexity --kl-divergence`` does): they need no dataset and no text, only the same
token sequence fed to every model, so they work on any GGUF, including the synthetic ladder, and
they measure exactly what quantisation changes. KL is the mean over positions of
KL(P_ref || P_quant) in nats; top-1 is the share of positions where both models' most likely
next token agree. The token sequence is a fixed seeded draw (not text), so results are
deterministic and cached next to the models, keyed by the files' sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.errors import ConfigError, ModelError

SCHEMA_VERSION = 1
QUALITY_FILE = "quality.json"
DEFAULT_TOKENS = 128
DEFAULT_SEED = 20_260_101
FloatArray = NDArray[np.float64]
Logits = Callable[[Path, list[int], int], FloatArray]


@dataclass(frozen=True)
class QualityScore:
    """One model file against its reference; ``kl`` in nats (0 = identical distributions)."""

    quant: str
    sha256: str
    kl: float
    kl_max: float
    top1: float
    positions: int
    reference: str


def log_softmax(logits: FloatArray) -> FloatArray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return np.asarray(x - np.log(np.exp(x).sum(axis=-1, keepdims=True)))


def kl_per_position(reference: FloatArray, candidate: FloatArray) -> FloatArray:
    """KL(P_ref || P_cand) at each position, from raw logits [positions, vocab]."""
    ref = log_softmax(reference)
    cand = log_softmax(candidate)
    if ref.shape != cand.shape:
        raise ValueError(f"logit shapes differ: {ref.shape} vs {cand.shape}")
    kl = (np.exp(ref) * (ref - cand)).sum(axis=-1)
    return np.asarray(np.maximum(kl, 0.0))  # rounding can give -1e-17 for identical rows


def top1_agreement(reference: FloatArray, candidate: FloatArray) -> float:
    ref = np.asarray(reference)
    return float((ref.argmax(axis=-1) == np.asarray(candidate).argmax(axis=-1)).mean())


def token_sequence(n_vocab: int, n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED,
                   first: int = 1, low: int = 3) -> list[int]:
    """A fixed sequence: ``first`` (BOS) then seeded ids in [low, n_vocab)."""
    rng = np.random.default_rng(seed)
    return [first, *(int(t) for t in rng.integers(low, n_vocab, n_tokens - 1))]


def llama_logits(path: Path, tokens: list[int], n_ctx: int) -> FloatArray:
    """Logits of every position with llama-cpp-python (``scores`` needs ``logits_all=True``)."""
    try:
        from llama_cpp import Llama
    except ImportError as error:
        raise ConfigError("harness quality needs llama-cpp-python (pip install "
                          "llama-cpp-python)") from error
    llm = Llama(model_path=str(path), n_ctx=n_ctx, logits_all=True, verbose=False, seed=0,
                n_threads=min(4, os.cpu_count() or 1), n_batch=min(n_ctx, 512))
    try:
        llm.eval(tokens)
        return np.array(llm.scores[: llm.n_tokens], dtype=np.float64)
    finally:
        llm.close()


def _sha256(path: Path) -> str:
    from harness.artifacts.gguf_info import file_sha256

    return file_sha256(path)


def cache_key(shas: Mapping[str, str], n_tokens: int, seed: int, reference: str) -> str:
    blob = json.dumps({"shas": dict(sorted(shas.items())), "n_tokens": n_tokens, "seed": seed,
                       "reference": reference, "schema": SCHEMA_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def measure_ladder(paths: Mapping[str, Path], *, reference: str = "F16",
                   n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED,
                   n_vocab: int | None = None, logits: Logits = llama_logits,
                   shas: Mapping[str, str] | None = None) -> list[QualityScore]:
    """Score every file of a ladder against ``reference`` (which scores KL 0, top-1 1)."""
    if reference not in paths:
        raise ConfigError(f"the ladder has no {reference} reference (it has {', '.join(paths)})")
    digests = dict(shas) if shas is not None else {q: _sha256(p) for q, p in paths.items()}
    n_ctx = max(64, n_tokens)
    ref_logits: FloatArray | None = None
    tokens: list[int] = []
    scores = []
    for quant in [reference, *(q for q in paths if q != reference)]:
        if ref_logits is None:
            vocab = n_vocab
            if vocab is None:
                from harness.artifacts.gguf_info import read_model_info

                vocab = int(read_model_info(paths[quant]).n_vocab)
            tokens = token_sequence(vocab, n_tokens, seed)
            ref_logits = logits(paths[quant], tokens, n_ctx)
            current = ref_logits
        else:
            current = logits(paths[quant], tokens, n_ctx)
        kl = kl_per_position(ref_logits, current)
        scores.append(QualityScore(quant=quant, sha256=digests[quant], kl=float(kl.mean()),
                                   kl_max=float(kl.max()),
                                   top1=top1_agreement(ref_logits, current),
                                   positions=int(kl.size), reference=reference))
    return scores


def quality_document(size: str, key: str, scores: Iterable[QualityScore], n_tokens: int,
                     seed: int) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "ladder": size, "key": key,
            "n_tokens": n_tokens, "seed": seed, "scores": [asdict(s) for s in scores]}


def _scores(data: Mapping[str, Any]) -> list[QualityScore]:
    return [QualityScore(**s) for s in data.get("scores", [])]


def ensure_quality(size: str = "tiny", *, cache_dir: Path | None = None,
                   n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED,
                   logits: Logits = llama_logits) -> tuple[list[QualityScore], Path, bool]:
    """Scores of the ``size`` ladder, from ``quality.json`` beside the models when its key
    (the files' sha256s and the token settings) still matches; else measured and written.

    Returns (scores, file, measured_now).
    """
    from harness.artifacts.testmodels import ensure_ladder, ladder_dir

    paths = ensure_ladder(size, cache_dir)
    shas = {q: _sha256(p) for q, p in paths.items()}
    key = cache_key(shas, n_tokens, seed, "F16")
    target = ladder_dir(size, cache_dir) / QUALITY_FILE
    if target.is_file():
        try:
            data = json.loads(target.read_text())
            if data.get("key") == key:
                return _scores(data), target, False
        except (OSError, ValueError, TypeError):
            pass  # unreadable or stale: measure again
    scores = measure_ladder(paths, n_tokens=n_tokens, seed=seed, logits=logits, shas=shas)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(quality_document(size, key, scores, n_tokens, seed), indent=2)
                   + "\n")
    os.replace(tmp, target)
    return scores, target, True


def load_quality_files(files: Iterable[Path]) -> dict[str, QualityScore]:
    """sha256 -> score from every readable quality.json given (bad files are a ModelError)."""
    by_sha: dict[str, QualityScore] = {}
    for path in files:
        try:
            data = json.loads(path.read_text())
            for score in _scores(data):
                by_sha[score.sha256] = score
        except (OSError, ValueError, TypeError) as error:
            raise ModelError(f"{path}: not a readable quality file ({error}); delete it and run "
                             "`harness quality` again") from error
    return by_sha


def cached_quality_files(cache_dir: Path | None = None) -> list[Path]:
    from harness.artifacts.testmodels import default_cache_root

    root = cache_dir if cache_dir is not None else default_cache_root()
    return sorted((root / "models").glob(f"*/{QUALITY_FILE}"))


def quality_for_trials(trials: pd.DataFrame,
                       by_sha: Mapping[str, QualityScore]) -> dict[tuple[str, str], QualityScore]:
    """(model_name, quant) -> score for the trials whose model file has a known score."""
    out: dict[tuple[str, str], QualityScore] = {}
    if trials.empty or not by_sha:
        return out
    pairs = trials[["model_name", "quant", "model_sha256"]].dropna().drop_duplicates()
    for model, quant, sha in pairs.itertuples(index=False):
        if sha in by_sha:
            out[(str(model), str(quant))] = by_sha[sha]
    return out
