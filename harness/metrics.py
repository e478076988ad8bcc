"""The one registry of metrics: name, trial column, direction, unit, format and aliases.

``compare``, ``history``, the gates and the report (``comparable`` metrics), ``recommend``'s
objectives, the matrix's ``adaptive.metric`` and the CLI's ``--metric``/``--objective`` all read
this table, so a metric's column or direction is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class Metric:
    name: str  # the canonical short name (what --metric, gates and JSON say)
    column: str  # the trials column it reads
    higher_is_better: bool
    unit: str  # of the column's values
    fmt: str  # format spec of one value in ``unit``
    title: str  # the name in sentences ("TTFT 80.0 ms")
    aliases: tuple[str, ...] = ()
    comparable: bool = True  # a per-trial figure compare/history/gates test builds on
    objective: str | None = None  # its name as a recommend objective (None: not one)
    adaptive: bool = False  # allowed as a matrix's adaptive.metric

    def text(self, value: float) -> str:
        """``20.1 tok/s``: one value with its unit."""
        return f"{value:{self.fmt}} {self.unit}"


METRICS: tuple[Metric, ...] = (
    Metric("tg_tps", "tg_tps", True, "tok/s", ".1f", "tg_tps", ("tg",),
           objective="tg_tps", adaptive=True),
    Metric("pp_tps", "pp_tps", True, "tok/s", ".1f", "pp_tps", ("pp",),
           objective="pp_tps", adaptive=True),
    Metric("ttft_ms", "ttft_ms", False, "ms", ".1f", "TTFT", ("ttft",), objective="ttft"),
    Metric("peak_pss", "peak_pss_bytes", False, "bytes", ",.0f", "peak PSS",
           ("peak_pss_bytes", "pss")),
    Metric("peak_rss", "peak_rss_bytes", False, "bytes", ",.0f", "peak RSS",
           ("peak_rss_bytes", "rss")),
    Metric("peak_swap", "peak_swap_bytes", False, "bytes", ",.0f", "peak swap",
           ("peak_swap_bytes", "swap")),
    Metric("sustained_tg", "sustained_tg_tps", True, "tok/s", ".1f", "sustained tg",
           ("sustained_tg_tps",), comparable=False, objective="sustained_tg"),
    Metric("energy", "tg_j_per_token", False, "J per generated token", ".3g", "energy",
           ("tg_j_per_token",), comparable=False, objective="energy"),
)
_BY_NAME: dict[str, Metric] = {
    key: m for m in METRICS for key in (m.name, *m.aliases)
}
#: The metrics compare, history and the report read by default.
DEFAULT_METRICS: tuple[str, ...] = ("tg_tps", "pp_tps", "peak_pss")
#: Canonical name -> trials column, of the comparable metrics.
METRIC_COLUMNS: dict[str, str] = {m.name: m.column for m in METRICS if m.comparable}
#: recommend's objectives -> their metric, in the registry's order.
OBJECTIVES: dict[str, Metric] = {m.objective: m for m in METRICS if m.objective}
#: What a matrix's ``adaptive.metric`` may name.
ADAPTIVE_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.adaptive)


def metric(name: str, comparable: bool = False) -> Metric:
    """The metric ``name`` (or an alias of it, any case) names; a ConfigError listing the
    known ones otherwise. ``comparable``: only those compare and history can test."""
    found = _BY_NAME.get(name.strip().lower())
    if found is None or (comparable and not found.comparable):
        pool = [m for m in METRICS if m.comparable or not comparable]
        known = ", ".join([*(m.name for m in pool), *sorted(a for m in pool for a in m.aliases)])
        raise ConfigError(f"unknown metric {name!r}; known: {known}")
    return found


def objective(name: str) -> Metric:
    """The metric a recommend objective ranks by; a ConfigError naming the objectives."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ConfigError(f"objective {name!r}: use one of {', '.join(OBJECTIVES)}") from None
