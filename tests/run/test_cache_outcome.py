"""The cache knob says what it did: a cold or warm launch whose evict or read-in failed, or did
not take, stores cache "unknown" with the reason, never the cold or warm it asked for."""

from __future__ import annotations

from harness.run.paging_measure import cache_outcome

MB = 1 << 20


def test_a_knob_that_held_keeps_its_value() -> None:
    assert cache_outcome("cold", 0, 100 * MB, "0 104857600 /m.gguf\n") == ("cold", None)
    assert cache_outcome("cold", 2 * MB, 100 * MB, "") == ("cold", None)  # a page or two mapped
    assert cache_outcome("warm", 100 * MB, 100 * MB, "") == ("warm", None)
    assert cache_outcome(None, None, 100 * MB, "") == (None, None)  # no knob: as found


def test_a_tool_that_failed_makes_the_cache_unknown_with_its_words() -> None:
    cache, why = cache_outcome("cold", None, 100 * MB,
                               "\npagecache: /data/local/tmp/m.gguf: Permission denied\n")
    assert cache == "unknown"
    assert why == ("evicting the model failed: pagecache: /data/local/tmp/m.gguf: "
                   "Permission denied")
    assert cache_outcome("warm", None, 100 * MB, "") == (
        "unknown", "reading in the model failed: the page-cache tool printed nothing")


def test_an_evict_or_read_in_that_did_not_take_is_unknown() -> None:
    assert cache_outcome("cold", 40 * MB, 100 * MB, "") == (
        "unknown", "evicting the model left 40% of it cached (pages another process maps stay)")
    assert cache_outcome("warm", 50 * MB, 100 * MB, "") == (
        "unknown", "reading in the model left only 50% of it cached (memory pressure reclaimed "
        "the rest)")
