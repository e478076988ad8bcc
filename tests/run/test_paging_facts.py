"""What a trial's paging evidence becomes: per-token reads in the decode window, and the label."""

from __future__ import annotations

import pytest

from harness.run.paging_measure import PAGING_SHARE, PAGING_TOTAL, Point, analyse, label

MB = 1_000_000


def _series(rate_mb_s: float, start_ms: int, end_ms: int, step_ms: int = 500,
            base: int = 0) -> list[Point]:
    """Storage reads growing at ``rate_mb_s`` from ``start_ms``, 10 faults a second."""
    return [Point(t, base // MB + (t - start_ms) // 100,
                  base + round(rate_mb_s * MB * (t - start_ms) / 1000))
            for t in range(start_ms, end_ms + 1, step_ms)]


def test_reads_per_token_come_from_the_decode_window_only() -> None:
    # load: 150 MB in the first 1.5 s (a cold start), then decoding at 2 tok/s reading 100 MB/s
    load = [Point(t, t // 100, round(100 * MB * t / 1000)) for t in range(0, 1501, 500)]
    decode = _series(100, 2000, 6000, base=150 * MB)
    result = analyse([*load, *decode], end_ms=6000, n_gen=8, tg_tps=2.0, model_bytes=150 * MB)
    assert result.read_bytes_per_token == pytest.approx(50 * MB)  # 100 MB/s / 2 tok/s
    assert result.major_faults_per_token == pytest.approx(5.0)
    assert result.read_bytes == decode[-1].read_bytes and result.paging is True


def test_a_model_that_fits_reads_at_load_and_not_while_decoding() -> None:
    load = [Point(t, 3, round(80 * MB * min(t, 1000) / 1000)) for t in range(0, 4001, 500)]
    result = analyse(load, end_ms=4000, n_gen=16, tg_tps=8.0, model_bytes=80 * MB)
    assert result.read_bytes_per_token == 0 and result.paging is False


def test_a_decode_window_with_one_sample_falls_back_to_the_total() -> None:
    points = [Point(0, 0, 0), Point(500, 10, 400 * MB)]
    result = analyse(points, end_ms=600, n_gen=2, tg_tps=20.0, model_bytes=150 * MB)
    assert result.read_bytes_per_token is None
    assert result.paging is True  # 400 MB > 1.5 x 150 MB over the trial


def test_label_thresholds() -> None:
    assert label(PAGING_SHARE * 100 * MB, None, 100 * MB) is True
    assert label(PAGING_SHARE * 100 * MB - 1, 10**12, 100 * MB) is False  # per token decides
    assert label(None, round(PAGING_TOTAL * 100 * MB) + 1, 100 * MB) is True
    assert label(None, 100 * MB, 100 * MB) is False
    assert label(None, None, 100 * MB) is None and label(1.0, 1, None) is None


def test_counters_missing_give_no_figures_and_no_label() -> None:
    result = analyse([Point(0, None, None)], end_ms=1000, n_gen=4, tg_tps=4.0, model_bytes=MB)
    assert (result.read_bytes, result.major_faults, result.paging) == (None, None, None)


def test_a_short_decode_window_is_measured_from_the_reading_before_it() -> None:
    # a cold start read the file at load; 32 tokens at 64 tok/s decode in half a second, with
    # one reading inside the window: from the one before it, nothing more was read
    load = [Point(t, 2, round(150 * MB * min(t, 1500) / 1500)) for t in range(0, 2001, 500)]
    points = [*load, Point(2600, 2, 150 * MB)]
    result = analyse(points, end_ms=2700, n_gen=32, tg_tps=64.0, model_bytes=150 * MB)
    assert result.read_bytes_per_token == 0 and result.paging is False


def test_a_decode_faster_than_storage_could_feed_paging_is_not_paging() -> None:
    # 8 tokens at 120 tok/s, no reading in the window, a cold load that read 2 x the file
    points = [Point(0, 3, 80 * MB), Point(880, 61, 166 * MB)]
    fast = analyse(points, end_ms=1000, n_gen=8, tg_tps=120.0, model_bytes=80 * MB,
                   storage_mb_s=100.0)
    assert fast.read_bytes_per_token is None and fast.paging is False  # 1.6 MB x 120 > 100 MB/s
    unknown = analyse(points, end_ms=1000, n_gen=8, tg_tps=120.0, model_bytes=80 * MB)
    assert unknown.paging is True  # no storage speed: the total rule


def _with_swap(points: list[Point], swap_share: float, swap_kb: int = 4096) -> list[Point]:
    """The same readings with ``swap_share`` of every byte read coming back from zram."""
    return [Point(p.t_ms, p.major_faults, p.read_bytes,
                  round((p.read_bytes or 0) * swap_share), swap_kb) for p in points]


def test_swap_ins_are_reads_but_not_paging() -> None:
    # an engine that read its weights in (load) and decodes with a part of them in zram: every
    # byte read while decoding is a swap-in (the kernel counts both in /proc/PID/io)
    load = [Point(t, t // 100, round(150 * MB * t / 1500)) for t in range(0, 1501, 500)]
    decode = [Point(t, 15 + t // 100, 150 * MB + round(100 * MB * (t - 2000) / 1000),
                    round(100 * MB * (t - 2000) / 1000), 40_000)
              for t in range(2000, 6001, 500)]
    load = [Point(p.t_ms, p.major_faults, p.read_bytes, 0, 0) for p in load]
    swapped = analyse([*load, *decode], end_ms=6000, n_gen=8, tg_tps=2.0,
                      model_bytes=150 * MB, maps_weights=False)
    assert swapped.read_bytes_per_token == pytest.approx(50 * MB)  # what /proc/PID/io says
    assert swapped.swap_in_bytes_per_token == pytest.approx(50 * MB)
    assert swapped.swap_in_bytes == 400 * MB and swapped.paging is False
    assert swapped.unknown is None
    # the same reads, half of them from the model file: paging
    half = analyse(_with_swap([*load, *decode], 0.5), end_ms=6000, n_gen=8, tg_tps=2.0,
                   model_bytes=150 * MB)
    assert half.paging is True


def test_swap_in_use_with_swap_ins_unread_leaves_paging_unknown() -> None:
    decode = [Point(p.t_ms, p.major_faults, p.read_bytes, None, 4096)
              for p in _series(100, 0, 4000)]
    unread = analyse(decode, end_ms=4000, n_gen=8, tg_tps=2.0, model_bytes=150 * MB)
    assert unread.paging is None and unread.unknown is not None
    assert "4096 kB swapped out" in unread.unknown
    # no swap in use: the reads are the file's, as before the swap-ins were read
    no_swap = [Point(p.t_ms, p.major_faults, p.read_bytes, None, 0) for p in decode]
    assert analyse(no_swap, end_ms=4000, n_gen=8, tg_tps=2.0, model_bytes=150 * MB).paging


def _mapped_decode_with_swap(swap_mb_s: float) -> list[Point]:
    """A mapped engine decoding at 2 tok/s and reading 100 MB/s, while the phone swaps in
    ``swap_mb_s`` (a background app's pages, or the engine's own: /proc/vmstat cannot tell)."""
    return [Point(t, t // 100, round(100 * MB * t / 1000), round(swap_mb_s * MB * t / 1000),
                  1024) for t in range(0, 4001, 500)]


def test_swap_ins_that_would_decide_the_label_leave_paging_unknown_with_the_figures() -> None:
    # 50 MB read per token, 49 MB of swap-ins per token: the engine's file reads are between
    # 1 MB (not paging: under 2% of 150 MB) and 50 MB (paging): the swap-ins decide, so unknown
    result = analyse(_mapped_decode_with_swap(98), end_ms=4000, n_gen=8, tg_tps=2.0,
                     model_bytes=150 * MB)
    assert result.paging is None
    assert result.columns()["paging_unknown"] == result.unknown
    assert result.unknown is not None
    for figure in ("50.0 MB per generated token", "swapped in 49.0 MB",
                   "between 1.0 and 50.0 MB", "paging line (3.0 MB"):
        assert figure in result.unknown, result.unknown
    # swap-ins a small share: the file reads are over the line either way, paging
    small = analyse(_mapped_decode_with_swap(10), end_ms=4000, n_gen=8, tg_tps=2.0,
                    model_bytes=150 * MB)
    assert small.paging is True and small.unknown is None
    # weights read into memory are no file pages: the reads left are not theirs, not paging
    read_in = analyse(_mapped_decode_with_swap(98), end_ms=4000, n_gen=8, tg_tps=2.0,
                      model_bytes=150 * MB, maps_weights=False)
    assert read_in.paging is False and read_in.unknown is None


def test_swap_ins_deciding_the_total_rule_leave_paging_unknown() -> None:
    # no decode window: 400 MB read over the trial, 300 MB of it swap-ins, a 150 MB model:
    # 100..400 MB either side of 1.5 x the model (225 MB)
    points = [Point(0, 0, 0, 0, 512), Point(500, 10, 400 * MB, 300 * MB, 512)]
    result = analyse(points, end_ms=600, n_gen=2, tg_tps=20.0, model_bytes=150 * MB)
    assert result.paging is None and result.unknown is not None
    assert "400.0 MB over the trial" in result.unknown
    assert "paging line (225.0 MB, 1.5 times the model)" in result.unknown
