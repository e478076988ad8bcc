"""KV cache quality at depth: what a quantised K/V cache costs a model that has read a long text.

Each cell is (weight quant, KV type, depth), measured at ``positions`` places of a long real
text (``position_offsets``: evenly spaced start offsets, so the places differ in content). At
each place the model reads ``depth`` tokens with that KV cache (BOS, then the text from the
offset), then the next ``window`` tokens are scored against the same weights with an f16 KV cache
at the same place (KL(P_f16 || P_kv) of the next-token distribution, top-1 agreement,
perplexity; pooled over every place), and ``gen_tokens`` tokens are generated greedily from the
depth, whose repetition is measured (harness.analysis.repetition): one continuation per place.

A continuation **loops** when at least ``LOOP_THRESHOLD`` of its 4-grams already occurred
earlier in it (``loops``). Real text does not do that: of 834 stretches of 256 Gemma tokens of
CPython's pydoc topics, this project's docs and the GPL-3, none repeats half of its 4-grams (the
most repetitive repeats 49%, the 99th percentile at most 35%), while a greedy loop repeats
nearly all of them (98.4% over 256 tokens). The share judges, not the longest exact loop: a
loop that numbers its turns ("10. Other Terms ... 11. Other Terms ...") has no long exact
repeat. Each result carries its text's own figure (``text_repetition``) so the threshold can be
checked on a user's text.

Pure parts only: parsing and validating the options, where the places are, the window
statistics, the loop figures, the results and their keys, which results may be compared (one
engine build and one rotation setting), and the KV loss ``harness recommend`` charges a
configuration. The measurement is in ``harness.analysis.kv_loss_measure``.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.analysis.quality import log_softmax
from harness.analysis.repetition import repeated_ngram_share
from harness.cell import KV_TYPES
from harness.errors import ConfigError

#: 2: several places per depth (KL pooled over them, one continuation each); 1: one place
SCHEMA_VERSION = 2
KV_QUALITY_FILE = "kv_quality.json"
DEFAULT_KV = ("f16", "q8_0", "q4_0", "q8_0/q4_0")
DEFAULT_DEPTHS = (6144,)
DEFAULT_WINDOW = 256
DEFAULT_GEN_TOKENS = 256
DEFAULT_POSITIONS = 8
#: a continuation loops when at least this share of its 4-grams occurred earlier in it
LOOP_NGRAM = 4
LOOP_THRESHOLD = 0.5
REFERENCE_KV = "f16"
#: KV types at least as precise as the reference: no loss is charged for them.
LOSSLESS_KV = frozenset({"f16", "f32"})


@dataclass(frozen=True)
class KvType:
    """The K and V cache types of one cell; ``label`` is ``q8_0`` or ``q8_0/q4_0`` (K/V)."""

    k: str
    v: str

    @property
    def label(self) -> str:
        return self.k if self.k == self.v else f"{self.k}/{self.v}"

    @property
    def lossless(self) -> bool:
        return self.k in LOSSLESS_KV and self.v in LOSSLESS_KV


def parse_kv_type(text: str) -> KvType:
    """``q8_0`` (K and V) or ``q8_0/q4_0`` (K q8_0, V q4_0); a ConfigError naming ``--kv``."""
    parts = [p.strip().lower() for p in text.split("/")]
    if len(parts) > 2 or any(p not in KV_TYPES for p in parts):
        raise ConfigError(f"--kv {text!r}: not a KV cache type llama.cpp accepts; give one of "
                          f"{', '.join(KV_TYPES)}, or K/V such as q8_0/q4_0")
    return KvType(parts[0], parts[-1])


def parse_kv_types(values: Iterable[str]) -> tuple[KvType, ...]:
    """Every ``--kv`` value (comma lists, repeatable), in order, without duplicates."""
    out: list[KvType] = []
    for value in values:
        for item in value.split(","):
            if not item.strip():
                continue
            kv = parse_kv_type(item.strip())
            if kv not in out:
                out.append(kv)
    if not out:
        raise ConfigError("--kv: name at least one KV cache type, e.g. --kv f16,q8_0,q4_0")
    return tuple(out)


def parse_depths(values: Iterable[str]) -> tuple[int, ...]:
    """Every ``--depth`` value (comma lists, repeatable), ascending, each at least 1."""
    out: set[int] = set()
    for value in values:
        for item in value.split(","):
            if not item.strip():
                continue
            try:
                depth = int(item.strip())
            except ValueError:
                raise ConfigError(f"--depth {item.strip()!r}: give a whole number of tokens, "
                                  "e.g. --depth 6144") from None
            if depth < 1:
                raise ConfigError(f"--depth {depth}: the depth is how many tokens the model "
                                  "reads before the scored window; give at least 1, e.g. "
                                  "--depth 6144")
            out.add(depth)
    if not out:
        raise ConfigError("--depth: name at least one depth, e.g. --depth 6144")
    return tuple(sorted(out))


def check_depths(depths: Sequence[int], n_tokens: int, window: int, text: str,
                 positions: int = 1) -> None:
    """Every depth leaves room in the text for ``positions`` places whose scored windows do not
    overlap: depth + positions * window <= tokens (``position_offsets``)."""
    if window < 1:
        raise ConfigError(f"--window {window}: score at least 1 token, e.g. --window 256")
    if positions < 1:
        raise ConfigError(f"--positions {positions}: measure at least 1 place per depth, e.g. "
                          f"--positions {DEFAULT_POSITIONS}")
    need = positions * window
    too_deep = [d for d in depths if d + need > n_tokens]
    if too_deep:
        places = (f"{positions} places whose windows of {window} tokens do not overlap"
                  if positions > 1 else f"a window of {window} after it")
        raise ConfigError(f"--depth {too_deep[0]}: {text} has {n_tokens} tokens, too few for "
                          f"that depth and {places}; give a depth of at most "
                          f"{n_tokens - need}" + (", fewer --positions or a longer --text"
                                                  if positions > 1 else ""))


def position_offsets(n_tokens: int, depth: int, window: int, positions: int) -> tuple[int, ...]:
    """Where each of ``positions`` places starts in the text: evenly spaced from 0 to the last
    offset that leaves ``depth`` tokens and a scored window inside it, so consecutive places
    are at least ``window`` tokens apart (``check_depths`` sees to that) and their windows and
    continuations begin in different parts of the text. Place ``i`` reads ``depth`` tokens from
    offset ``i`` (``position_tokens``) and continues at text token ``offset + depth``."""
    span = n_tokens - depth - window
    if positions < 1 or span < (positions - 1) * window:
        raise ValueError(f"{positions} places of depth {depth} and window {window} do not fit "
                         f"{n_tokens} tokens")
    if positions == 1:
        return (0,)
    return tuple(i * span // (positions - 1) for i in range(positions))


def position_tokens(tokens: Sequence[int], offset: int) -> list[int]:
    """The text as the model reads it at the place starting at ``offset``: the first token
    (the BOS the tokenizer adds) then the text from ``offset + 1`` on, so ``depth`` tokens of it
    are BOS plus ``depth - 1`` of text, and token ``depth`` is text token ``offset + depth``."""
    return [*tokens[:1], *tokens[offset + 1:]] if offset else list(tokens)


def check_context(depths: Sequence[int], after: int, n_ctx_train: int) -> None:
    """Every depth plus what is read or generated after it fits the model's trained context
    (0: unknown, not checked): beyond it the figures would measure the model, not the cache."""
    too_deep = [d for d in depths if n_ctx_train and d + after > n_ctx_train]
    if too_deep:
        raise ConfigError(f"--depth {too_deep[0]}: with {after} tokens after it that passes the "
                          f"model's trained context of {n_ctx_train} tokens; give a depth of at "
                          f"most {n_ctx_train - after}")


def atoi(text: str | None) -> int:
    """C's ``atoi``: optional blanks and sign, then the leading digits (0 when there are none),
    as llama.cpp reads ``LLAMA_ATTN_ROT_DISABLE``."""
    if text is None:
        return 0
    s = text.lstrip(" \t\n\v\f\r")
    sign = -1 if s[:1] == "-" else 1
    if s[:1] in "+-" and s:
        s = s[1:]
    digits = ""
    for ch in s:
        if not ch.isdigit() or not ch.isascii():
            break
        digits += ch
    return sign * int(digits) if digits else 0


def rotation_enabled(environ: Mapping[str, str]) -> bool:
    """Whether llama.cpp rotates quantised K/V (on unless LLAMA_ATTN_ROT_DISABLE is non-zero)."""
    return atoi(environ.get("LLAMA_ATTN_ROT_DISABLE")) == 0


@dataclass(frozen=True)
class EngineBuild:
    """The engine that measured, and the KV rotation setting it ran with.

    Two results are comparable only when all of it is equal: another llama.cpp commit, CPU
    kernels or rotation setting changes the figures for reasons other than the KV type.
    """

    llama_cpp_python: str  # llama_cpp.__version__
    llama_cpp_commit: str | None  # the vendored llama.cpp commit, when known
    system_info: str  # llama_print_system_info(): the CPU features the kernels were built for
    kv_rotation: bool

    @property
    def label(self) -> str:
        commit = (self.llama_cpp_commit or "unknown")[:10]
        rotation = "rotation on" if self.kv_rotation else "rotation off"
        return f"llama-cpp-python {self.llama_cpp_python} (llama.cpp {commit}), {rotation}"


def loops(repeated_4gram: float) -> bool:
    """Whether a continuation with this repeated 4-gram share loops (see the module docstring)."""
    return repeated_4gram >= LOOP_THRESHOLD


@dataclass(frozen=True)
class Continuation:
    """The greedy continuation at one place: where the place starts in the text (it continues
    the text at ``offset + depth``), how many tokens it has, and its repetition figures."""

    offset: int
    gen_tokens: int
    repeated_4gram: float
    longest_loop: int

    @property
    def loops(self) -> bool:
        return loops(self.repeated_4gram)


@dataclass(frozen=True)
class KvCell:
    """One (weight quant, KV type, depth) result against f16 KV at the same places and weights.

    ``kl``, ``kl_max``, ``top1`` and ``ppl`` are pooled over every place's window (``window``
    tokens each). ``repeated_4gram`` is the median of the continuations' shares, and
    ``longest_loop`` and ``gen_tokens`` their low medians (a value one continuation had); each
    continuation is in ``continuations``. A cell of schema 1 has one place and none listed.
    """

    quant: str
    sha256: str  # the weight file's
    kv: str  # KvType.label
    type_k: str
    type_v: str
    depth: int
    window: int
    kl: float
    kl_max: float
    top1: float
    ppl: float
    gen_tokens: int  # tokens generated (fewer than asked when the model ended its text)
    repeated_4gram: float
    longest_loop: int
    text: str  # name@sha256 prefix
    build: EngineBuild
    measured_at: str = ""  # ISO time
    ladder_shas: tuple[str, ...] = field(default=())  # every file of the ladder it belongs to
    continuations: tuple[Continuation, ...] = field(default=())  # one per place, in text order

    @property
    def runs(self) -> tuple[Continuation, ...]:
        """The continuations (a schema-1 cell's single one rebuilt from its figures)."""
        return self.continuations or (Continuation(0, self.gen_tokens, self.repeated_4gram,
                                                   self.longest_loop),)

    @property
    def looping(self) -> int:
        """How many continuations loop."""
        return sum(run.loops for run in self.runs)

    @property
    def loop_share(self) -> float:
        return self.looping / len(self.runs)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ladder_shas"] = list(self.ladder_shas)
        data["continuations"] = [asdict(run) for run in self.continuations]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KvCell:
        values = dict(data)
        values["build"] = EngineBuild(**values["build"])
        values["ladder_shas"] = tuple(values.get("ladder_shas", ()))
        values["continuations"] = tuple(Continuation(**run)
                                        for run in values.get("continuations", ()))
        return cls(**values)


def repetition_figures(runs: Sequence[Continuation]) -> tuple[float, int, int]:
    """(median repeated 4-gram share, low-median longest loop, low-median tokens) of the
    continuations: the per-cell figures a table or the report shows."""
    if not runs:
        raise ValueError("no continuations")
    return (float(statistics.median(r.repeated_4gram for r in runs)),
            int(statistics.median_low(r.longest_loop for r in runs)),
            int(statistics.median_low(r.gen_tokens for r in runs)))


def loop_summary(cell: KvCell, baseline: KvCell | None) -> dict[str, Any]:
    """The loop figures of ``cell`` beside its f16 baseline's (measured at the same places):
    continuations, how many loop, their share, the median repeated 4-gram share, and, paired
    place by place, how often one loops where the other does not."""
    out: dict[str, Any] = {"continuations": len(cell.runs), "looping": cell.looping,
                           "loop_share": cell.loop_share,
                           "median_repeated_4gram": cell.repeated_4gram}
    if baseline is not None:
        ref = {run.offset: run.loops for run in baseline.runs}
        paired = [(run.loops, ref[run.offset]) for run in cell.runs if run.offset in ref]
        out["f16"] = {"continuations": len(baseline.runs), "looping": baseline.looping,
                      "loop_share": baseline.loop_share,
                      "median_repeated_4gram": baseline.repeated_4gram}
        out["loops_where_f16_does_not"] = sum(a and not b for a, b in paired)
        out["f16_loops_where_this_does_not"] = sum(b and not a for a, b in paired)
    return out


@dataclass(frozen=True)
class TextRepetition:
    """The loop figure of the text itself: its stretches of ``length`` tokens, judged as a
    continuation is (how many would count as looping, and their median repeated share)."""

    stretches: int
    length: int
    looping: int
    median_repeated_4gram: float


def text_repetition(tokens: Sequence[int], length: int) -> TextRepetition:
    """The text's own non-overlapping stretches of ``length`` tokens (after the BOS), judged by
    the loop threshold: how often real text of this domain would pass for a loop."""
    shares = [repeated_ngram_share(tokens[start:start + length], LOOP_NGRAM)
              for start in range(1, len(tokens) - length + 1, length)] if length > 0 else []
    return TextRepetition(len(shares), length, sum(loops(s) for s in shares),
                          float(statistics.median(shares)) if shares else 0.0)


def cell_key(sha256: str, kv: KvType, depth: int, window: int, gen_tokens: int,
             text_sha: str, build: EngineBuild, positions: int = 1) -> str:
    """What makes a cached cell valid: weights, settings (places per depth included), text,
    engine build, rotation and the method's schema (a schema-1 cell never answers now)."""
    blob = json.dumps({"sha": sha256, "k": kv.k, "v": kv.v, "depth": depth, "window": window,
                       "gen": gen_tokens, "text": text_sha, "build": asdict(build),
                       "positions": positions, "schema": SCHEMA_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class WindowStats:
    kl: NDArray[np.float64]  # per scored position
    agree: NDArray[np.bool_]
    nll: NDArray[np.float64]


def window_stats(reference: NDArray[Any], candidate: NDArray[Any], targets: Sequence[int],
                 rows: int = 16) -> WindowStats:
    """Per position of a window: KL(P_ref || P_cand), top-1 agreement and the candidate's
    negative log-likelihood of the true next token, from raw logits [positions, vocab].

    ``rows`` at a time: a 262k-token vocabulary makes a whole window in float64 half a GB.
    """
    if reference.shape != candidate.shape or reference.shape[0] != len(targets):
        raise ValueError(f"shapes differ: {reference.shape}, {candidate.shape}, "
                         f"{len(targets)} targets")
    kls, agree, nll = [], [], []
    target = np.asarray(targets, dtype=np.int64)
    for start in range(0, reference.shape[0], rows):
        ref = log_softmax(reference[start:start + rows])
        cand = log_softmax(candidate[start:start + rows])
        kls.append(np.maximum((np.exp(ref) * (ref - cand)).sum(axis=-1), 0.0))
        agree.append(ref.argmax(axis=-1) == cand.argmax(axis=-1))
        nll.append(-cand[np.arange(len(cand)), target[start:start + rows]])
    return WindowStats(np.concatenate(kls), np.concatenate(agree), np.concatenate(nll))


def one_build(cells: Sequence[KvCell]) -> EngineBuild:
    """The single engine build (with its rotation setting) of ``cells``; refuses a mix."""
    builds = {c.build for c in cells}
    if len(builds) != 1:
        names = "; ".join(sorted(b.label for b in builds)) or "none"
        raise ConfigError(f"KV quality results of different engine builds or rotation settings "
                          f"are not comparable ({names}); compare one build at a time")
    return next(iter(builds))


def by_build(cells: Iterable[KvCell]) -> dict[EngineBuild, list[KvCell]]:
    """Cells kept apart per engine build and rotation setting, in their order."""
    out: dict[EngineBuild, list[KvCell]] = {}
    for c in cells:
        out.setdefault(c.build, []).append(c)
    return out


def kv_delta(a: KvCell, b: KvCell) -> float:
    """How much more KL ``b`` costs than ``a``; refuses cells of different builds or rotation."""
    one_build([a, b])
    return b.kl - a.kl


@dataclass(frozen=True)
class KvLoss:
    """What a configuration's KV cache costs in KL, and from which measurement."""

    kl: float
    kv: str
    depth: int | None  # the measured depth used (None: a lossless KV type, nothing measured)
    quant: str | None = None  # the weights it was measured with
    note: str = ""

    def describe(self) -> str:
        if self.depth is None:
            return f"KV {self.kv} lossless"
        weights = f" with {self.quant} weights" if self.quant else ""
        return f"KV {self.kv} {self.kl:.3g} at depth {self.depth}{weights}{self.note}"


@dataclass(frozen=True)
class KvEvidence:
    """Every cached KV cell; ``loss`` answers what ``harness recommend`` charges a config."""

    cells: tuple[KvCell, ...] = ()

    def loss(self, weight_sha: str | None, type_k: str, type_v: str,
             n_ctx: int) -> KvLoss | None:
        """The KL of the KV cell measured at the nearest depth not above ``n_ctx`` (the
        shallowest one when every depth is above: deeper reads lose more, so that errs safe),
        with these weights, else with another file of the same ladder; None when unmeasured.

        Cells of several engine builds are never mixed: the newest measurement's build wins.
        """
        kv = KvType(type_k, type_v)
        if kv.lossless:
            return KvLoss(0.0, kv.label, None)
        if weight_sha is None:
            return None
        matching = [c for c in self.cells if (c.type_k, c.type_v) == (kv.k, kv.v)]
        own = [c for c in matching if c.sha256 == weight_sha]
        pool = own or [c for c in matching if weight_sha in c.ladder_shas]
        if not pool:
            return None
        newest = max(pool, key=lambda c: c.measured_at).build
        pool = by_build(pool)[newest]
        below = [c for c in pool if c.depth <= n_ctx]
        depth = max(c.depth for c in below) if below else min(c.depth for c in pool)
        chosen = max((c for c in pool if c.depth == depth), key=lambda c: c.measured_at)
        note = "" if below else f" (no depth measured at or below n_ctx {n_ctx})"
        return KvLoss(chosen.kl, kv.label, chosen.depth,
                      None if chosen.sha256 == weight_sha else chosen.quant, note)


def combined_kl(weight_kl: float, kv: KvLoss) -> float:
    """A config's quality loss: the weights' KL plus its KV cache's.

    Both are small divergences from one reference (F16 weights, f16 KV) caused by independent
    perturbations; to second order each KL is a quadratic form in its perturbation of the
    log-probabilities, and the cross term of independent perturbations averages out, so the
    divergence of both together is about the sum of the two.
    """
    return weight_kl + kv.kl
