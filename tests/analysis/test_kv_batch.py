"""The KV check's batch child: its log cut into one section per cell, an unfinished cell none."""

from __future__ import annotations

from harness.analysis.kv_size_check import MARK, split_sections


def test_each_cell_gets_the_lines_between_its_marks() -> None:
    log = "\n".join([
        "llama-cpp-python import noise",
        f"{MARK}0 start", "llama_kv_cache: size = 9.00 MiB", f"{MARK}0 end 0",
        f"{MARK}1 start", "llama_kv_cache: size = 4.78 MiB", "more", f"{MARK}1 end 1",
    ])
    assert split_sections(log, 2) == ["llama_kv_cache: size = 9.00 MiB",
                                      "llama_kv_cache: size = 4.78 MiB\nmore"]


def test_a_cell_the_child_died_in_has_no_section() -> None:
    log = "\n".join([f"{MARK}0 start", "a", f"{MARK}0 end 0", f"{MARK}1 start", "b"])
    assert split_sections(log, 3) == ["a", None, None]


def test_an_end_mark_of_another_cell_closes_nothing() -> None:
    log = "\n".join([f"{MARK}0 start", "a", f"{MARK}1 end 0", "b"])
    assert split_sections(log, 2) == [None, None]
