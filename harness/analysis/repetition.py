"""How much a generation repeats itself: the two figures `harness quality` shows per KV cell.

A quantised KV cache that loses too much precision at depth shows up first as a model that
loops: it copies what it has just written. Two figures catch that on token ids, with no
tokenizer and no text:

- the repeated n-gram share: of the generation's n-grams (every start position, overlapping),
  the share that already occurred earlier in the same generation (n = 4 by default);
- the longest loop: the largest L such that some L tokens are an exact copy of the L tokens
  right before them (a tandem repeat ``xx`` with ``len(x) == L``). ``a b c a b c`` has a loop of
  3; ``a b c a b c a b c a b c`` one of 6, its second half repeating the first.
"""

from __future__ import annotations

from collections.abc import Sequence


def repeated_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Share of the n-grams of ``tokens`` that occurred earlier in ``tokens`` (0 when none)."""
    if n < 1:
        raise ValueError(f"n-gram length must be at least 1, not {n}")
    total = len(tokens) - n + 1
    if total <= 0:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for start in range(total):
        gram = tuple(tokens[start:start + n])
        if gram in seen:
            repeated += 1
        else:
            seen.add(gram)
    return repeated / total


def longest_loop(tokens: Sequence[int]) -> int:
    """The largest L with ``tokens[i:i + L] == tokens[i - L:i]`` for some i (0 when none).

    For each shift L the positions that equal the token L before them form runs; a run of at
    least L such positions is a stretch of L tokens repeating the L right before it.
    """
    seq = list(tokens)
    best = 0
    for shift in range(len(seq) // 2, 0, -1):
        if shift <= best:
            break
        run = 0
        for i in range(shift, len(seq)):
            run = run + 1 if seq[i] == seq[i - shift] else 0
            if run >= shift:
                best = shift
                break
    return best
