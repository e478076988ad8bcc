"""Affinity and thread count read back from the watcher's files, and when a trial is flagged."""

from __future__ import annotations

from harness.run.affinity import Readback, check_applied, parse_readback


def test_readback_takes_the_last_line_with_the_most_threads() -> None:
    # loading (1 thread, all CPUs), threads starting, all four pinned, then winding down
    log = "1 0-7\n3 0-7 4-7\n4 4-7\n2 0-7\n"
    readback = parse_readback("4", log)
    assert readback == Readback(threads_seen=4, applied_cpus=frozenset({4, 5, 6, 7}))


def test_readback_without_an_affinity_log_keeps_the_thread_count() -> None:
    assert parse_readback("2", "") == Readback(threads_seen=2, applied_cpus=None)
    assert parse_readback("", "") == Readback(threads_seen=None, applied_cpus=None)
    assert parse_readback("", "garbage\n3\nx 0-1\n") == Readback(None, None)
    # the affinity scan saw more threads than the status samples: the larger count wins
    assert parse_readback("1", "2 0-1\n").threads_seen == 2


def test_a_mask_that_took_effect_is_not_flagged() -> None:
    check = check_applied("0xf0", 4, Readback(4, frozenset({4, 5, 6, 7})))
    assert (check.applied_affinity, check.affinity_applied, check.not_applied) == (
        "4-7", True, None)
    strict = check_applied("0xf0", 4, Readback(4, frozenset({5})))  # --cpu-strict: one each
    assert strict.affinity_applied is True and strict.not_applied is None


def test_an_ineffective_mask_is_flagged_with_what_ran_where() -> None:
    check = check_applied("0x2", 2, Readback(2, frozenset({0, 1})))
    assert check.affinity_applied is False
    assert check.not_applied == "affinity 0x2 (CPUs 1) requested, threads ran on CPUs 0-1"


def test_fewer_threads_than_asked_is_flagged_and_all_cpus_is_not_checked() -> None:
    check = check_applied(None, 4, Readback(2, frozenset({0, 1})))
    assert check.affinity_applied is None and check.applied_affinity == "0-1"
    assert check.not_applied == "4 threads asked, at most 2 ran"
    both = check_applied("0x2", 4, Readback(2, frozenset({0, 1})))
    assert both.not_applied is not None and "; 4 threads asked" in both.not_applied


def test_nothing_seen_flags_nothing() -> None:
    check = check_applied("0x2", 2, Readback(None, None))
    assert (check.affinity_applied, check.threads_seen, check.not_applied) == (None, None, None)
