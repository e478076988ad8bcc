"""The byte units and the formats every message, table and report prints sizes and ratios in."""

from __future__ import annotations

from harness.units import GIB, KIB, MIB, gib, mib, pct


def test_units_are_powers_of_1024() -> None:
    assert (KIB, MIB, GIB) == (1024, 1024**2, 1024**3)


def test_mib_groups_thousands_unless_asked_not_to() -> None:
    assert mib(3 * MIB) == "3 MiB"
    assert mib(1536 * MIB) == "1,536 MiB"
    assert mib(27.25 * MIB, 1, grouped=False) == "27.2 MiB"
    assert mib(5000 * MIB, 1, grouped=False) == "5000.0 MiB"


def test_gib_switches_to_mib_below_one_gib() -> None:
    assert gib(3 * GIB // 2) == "1.50 GiB"
    assert gib(GIB) == "1.00 GiB"
    assert gib(12 * MIB) == "12.0 MiB"
    assert gib(None) == "–" and gib(None, missing="-") == "-"


def test_pct_is_a_signed_change() -> None:
    assert pct(1.05) == "+5.0%"
    assert pct(0.9) == "-10.0%"
    assert pct(float("nan")) == "–" and pct(float("inf"), missing="-") == "-"
    assert pct(None) == "–"
