"""``dumpsys meminfo <pid>`` in the layouts phones print across releases (issue 47): 7 columns
before Android 11 (no Rss Total, ``TOTAL:`` row only), 8 after, 11 with ``-a``; the swap column
titled ``Swapped Dirty``, ``Swap Dirty`` or ``SwapPss Dirty``; no EGL mtrack row; seven-digit
values two spaces apart; no App Summary on old releases. Built here from the layouts of
frameworks/base's ActivityThread/Debug dump code; the figures are made up."""

from __future__ import annotations

import pytest

from harness.android import parse_meminfo

OLD = """Applications Memory Usage (in Kilobytes):
Uptime: 5224 Realtime: 5224

** MEMINFO in pid 4242 [llama-bench] **
                   Pss  Private  Private  Swapped     Heap     Heap     Heap
                 Total    Dirty    Clean    Dirty     Size    Alloc     Free
                ------   ------   ------   ------   ------   ------   ------
  Native Heap  1234567  1234000        0      512  1300000  1250000    50000
     .so mmap     3286      148     1744        0
    EGL mtrack    21072    21072        0        0
     GL mtrack     7124     7124        0        0
      Unknown      185      184        0        0
        TOTAL  1266234  1262528     1744      512  1300000  1250000    50000
"""
NEW = """** MEMINFO in pid 4242 [llama-bench] **
                   Pss  Private  Private  SwapPss      Rss     Heap     Heap     Heap
                 Total    Dirty    Clean    Dirty    Total     Size    Alloc     Free
                ------   ------   ------   ------   ------   ------   ------   ------
  Native Heap    10468    10408        0       27    12000    20480    14462     6017
     GL mtrack     7124     7124        0        0     7124
      Unknown      185      184        0        0      200
        TOTAL    25592    24000      100       27    94220    20480    14462     6017

 App Summary
                       Pss(KB)                        Rss(KB)
                        ------                         ------
         Native Heap:    10408                          12000
            Graphics:     7124                           7124

           TOTAL PSS:    25592            TOTAL RSS:    94220       TOTAL SWAP PSS:       27
"""
A = (
    "** MEMINFO in pid 4242 [llama-bench] **\n"
    "                   Pss      Pss   Shared  Private   Shared  Private  S"
    "wapPss      Rss     Heap     Heap     Heap\n"
    "                 Total    Clean    Dirty    Dirty    Clean    Clean   "
    " Dirty    Total     Size    Alloc     Free\n"
    "                ------   ------   ------   ------   ------   ------   "
    "------   ------   ------   ------   ------\n"
    "  Native Heap    10468        0      100    10408        0        0   "
    "    27    12000    20480    14462     6017\n"
    "     GL mtrack     7124        0        0     7124        0        0  "
    "      0     7124\n"
    "        TOTAL    25592      300      100    24000      500      100   "
    "    27    94220    20480    14462     6017\n"
)


def test_before_android_11_seven_columns_seven_digits_and_no_summary() -> None:
    info = parse_meminfo(OLD)
    assert info is not None
    assert (info.pss_kb, info.rss_kb) == (1266234, None)  # no Rss column: not read, not 0
    assert (info.swap_pss_kb, info.swap_is_pss) == (512, False)  # plain swapped pages
    assert info.mtrack_kb == 21072 + 7124  # EGL and GL mtrack rows
    assert info.graphics_kb is None  # no App Summary


@pytest.mark.parametrize("title", ["Swapped", "Swap", "SwapPss"])
def test_the_swap_column_by_any_of_its_titles(title: str) -> None:
    text = OLD.replace("Private  Swapped     Heap", f"Private  {title:>7}     Heap")
    info = parse_meminfo(text)
    assert info is not None and info.swap_pss_kb == 512
    assert info.swap_is_pss is (title == "SwapPss")


def test_android_11_eight_columns_totals_and_no_egl_row() -> None:
    info = parse_meminfo(NEW)
    assert info is not None
    assert (info.pss_kb, info.rss_kb, info.swap_pss_kb) == (25592, 94220, 27)
    assert info.mtrack_kb == 7124 and info.graphics_kb == 7124 and info.native_heap_kb == 10408


def test_the_a_flag_s_eleven_columns_are_read_by_title() -> None:
    info = parse_meminfo(A)
    assert info is not None
    assert (info.pss_kb, info.rss_kb, info.private_dirty_kb, info.private_clean_kb) == (
        25592, 94220, 24000, 100)
    assert info.mtrack_kb == 7124
