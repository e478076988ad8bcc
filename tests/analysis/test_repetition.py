"""Repetition figures of a generation: repeated 4-gram share and longest loop, on hand-made ids."""

from __future__ import annotations

import pytest

from harness.analysis.repetition import longest_loop, repeated_ngram_share


def test_a_generation_without_repeats_has_no_repeated_ngrams_and_no_loop() -> None:
    tokens = list(range(20))
    assert repeated_ngram_share(tokens) == 0.0
    assert longest_loop(tokens) == 0


def test_repeated_share_counts_the_later_occurrences_of_each_4gram() -> None:
    # 4-grams: abcd bcdx cdxa dxab xabc abcd -> the last one occurred before: 1 of 6
    a, b, c, d, x = 1, 2, 3, 4, 9
    assert repeated_ngram_share([a, b, c, d, x, a, b, c, d]) == pytest.approx(1 / 6)
    # a constant run: every 4-gram after the first repeats it
    assert repeated_ngram_share([7] * 10) == pytest.approx(6 / 7)
    # 3 repeats of 2-grams out of 5 (ab ba ab ba ab)
    assert repeated_ngram_share([a, b, a, b, a, b], n=2) == pytest.approx(3 / 5)


def test_repeated_share_of_too_short_a_generation_is_zero() -> None:
    assert repeated_ngram_share([1, 2, 3]) == 0.0
    with pytest.raises(ValueError):
        repeated_ngram_share([1, 2, 3], n=0)


def test_longest_loop_is_the_longest_stretch_repeating_the_stretch_right_before_it() -> None:
    abc = [1, 2, 3]
    assert longest_loop([5, *abc, *abc, 6]) == 3
    assert longest_loop(abc * 3) == 3  # abc abc abc: no 4.5-token stretch repeats itself
    assert longest_loop(abc * 4) == 6  # the second half repeats the first
    assert longest_loop([8, 8]) == 1
    # a repeat that is not adjacent is no loop: a b c x a b c
    assert longest_loop([*abc, 9, *abc]) == 0


def test_the_longest_loop_wins_over_shorter_ones_anywhere_in_the_sequence() -> None:
    loop = [10, 11, 12, 13, 14]
    tokens = [1, 1, 2, 3, *loop, *loop, 4, 5, 4, 5]
    assert longest_loop(tokens) == 5
