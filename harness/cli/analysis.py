"""Analysis commands: compare, history, recommend, quality, export, import, nightly, noise.

Thin click layer: each command reads its inputs, calls ``harness.analysis`` and prints a rich
table or, with ``--json``, a document for scripts. Exit codes: 0 done, 1 a gate failed
(``compare``, ``nightly``), 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.ab import BuildComparison, canonical_gates, compare_builds, load_sequential
from harness.analysis.alerts import AlertDocument
from harness.analysis.frames import load_device_trials, load_trials, parse_metrics
from harness.analysis.kv_loss import (
    DEFAULT_DEPTHS,
    DEFAULT_GEN_TOKENS,
    DEFAULT_KV,
    DEFAULT_POSITIONS,
    DEFAULT_WINDOW,
    LOOP_NGRAM,
    LOOP_THRESHOLD,
)
from harness.analysis.nightly import (
    Reporter,
    Runner,
    alerts_path,
    run_nightly,
    run_on_alert,
    write_alerts,
)
from harness.analysis.recommend import Recommendation
from harness.budget import DEFAULT_RESERVE_BYTES
from harness.cli.build import BUILDS_OPTION
from harness.errors import ConfigError, HarnessError
from harness.metrics import DEFAULT_METRICS, METRIC_COLUMNS, OBJECTIVES
from harness.plan import parse_size
from harness.units import pct
from harness.units import size as size_text

RESULTS = click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
                       show_default=True, help="Results store root.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print a JSON document for scripts.")
GATE = click.option("--gate", "gate_specs", multiple=True, metavar="SPEC",
                    help="Regression gate, e.g. tg_tps:-3% or peak_pss:+5% (repeatable).")

_DEFAULT_METRICS = ",".join(DEFAULT_METRICS)
_METRIC_NAMES = ", ".join(METRIC_COLUMNS)


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 220, highlight=False)


def _fmt(value: float | None, digits: int = 1, *, size: bool = False) -> str:
    """A median for a table: sizes (peak_pss, peak_rss) in MiB, rates with ``digits``."""
    if value is None or not math.isfinite(value):
        return "-"
    if size:
        return size_text(value)
    return f"{value:,.{digits}f}"


_COLOURS = {"regression": "red", "improvement": "green", "same": "", "unstable": "yellow"}


def comparison_table(result: BuildComparison, title: str | None = None) -> Table:
    """Both sides are named by build and engine: in the title and in the median columns."""
    base, cand = escape(str(result.baseline_side)), escape(str(result.candidate_side))
    table = Table(title=escape(title) if title else f"{cand} vs {base}")
    if title:
        table.caption = f"baseline {base}, candidate {cand}"
    for name in ("device", "config", "metric", f"baseline {base}", f"candidate {cand}",
                 "change", "95% CI", "p_adj", "delta", "verdict"):
        table.add_column(name, justify="left" if name in ("device", "config", "metric",
                                                          "verdict") else "right")
    table.add_column("why", overflow="fold")
    for cell in result.cells:
        c = cell.comparison
        colour = _COLOURS[c.verdict]
        verdict = f"[{colour}]{c.verdict}[/{colour}]" if colour else c.verdict
        why = ", ".join(c.causes) if c.causes else ""
        table.add_row(escape(cell.key.device), escape(cell.label), cell.metric,
                      _fmt(cell.median_baseline, size=cell.metric.startswith("peak")),
                      _fmt(cell.median_candidate, size=cell.metric.startswith("peak")),
                      pct(c.ratio, missing="-"),
                      f"[{pct(c.ci_low, missing='-')}, {pct(c.ci_high, missing='-')}]",
                      f"{c.p_adjusted:.3g}" if math.isfinite(c.p_adjusted) else "-",
                      f"{c.cliffs_delta:+.2f}" if math.isfinite(c.cliffs_delta) else "-",
                      verdict, why)
    return table


def _gate_lines(result: BuildComparison) -> list[str]:
    failed = [g for g in result.gates if not g.passed]
    lines = [f"FAIL {g.message}" for g in failed]
    lines += [f"note: {g.note}" for g in result.gates if g.note]
    if result.gates:
        lines.append(f"gates: {len(failed)} failed of {len(result.gates)} checks")
    return lines


@click.command("compare")
@click.option("--baseline", default=None, metavar="BUILD",
              help="Build id of the reference (optional with --baseline-engine when that "
                   "engine has one build).")
@click.option("--candidate", default=None, metavar="BUILD",
              help="Build id to judge (optional with --candidate-engine when that engine has "
                   "one build).")
@click.option("--baseline-engine", default=None, metavar="ENGINE",
              help="Engine of the reference side (default: the only engine of its build).")
@click.option("--candidate-engine", default=None, metavar="ENGINE",
              help="Engine of the judged side (default: the only engine of its build).")
@RESULTS
@click.option("--metric", "metric_text", default=_DEFAULT_METRICS, show_default=True,
              help=f"Comma-separated metrics: {_METRIC_NAMES}.")
@GATE
@click.option("--junit", type=click.Path(path_type=Path), default=None,
              help="Also write JUnit XML here (one testcase per device x config x metric).")
@click.option("--include-throttled", is_flag=True,
              help="Keep throttled trials (excluded by default).")
@click.option("--recent", type=click.IntRange(1), default=None, metavar="N",
              help="Only each side's N newest usable trials per cell [default: all].")
@JSON
def compare_command(baseline: str | None, candidate: str | None, baseline_engine: str | None,
                    candidate_engine: str | None, results: Path, metric_text: str,
                    gate_specs: tuple[str, ...], junit: Path | None, include_throttled: bool,
                    recent: int | None, as_json: bool) -> None:
    """A/B verdict per device and config: ratio of medians, 95% CI, BH-adjusted p, Cliff's delta.

    A side is a build and the engine that ran it, so this compares two builds or two engines on
    the configurations both measured. Exit code 1 when a gate fails (docs/statistics.md gives
    the rules), 0 otherwise.

    \b
    Example:
      harness compare --baseline b4100 --candidate b4101
      harness compare --baseline b4100 --candidate b4101 --gate tg_tps:-3% --junit out.xml
      harness compare --baseline-engine llama-bench --candidate-engine llama-cpp-python
    """
    gates = canonical_gates(gate_specs)
    result = compare_builds(load_trials(results), baseline, candidate,
                            parse_metrics(metric_text), gates,
                            include_throttled=include_throttled,
                            baseline_engine=baseline_engine, candidate_engine=candidate_engine,
                            recent=recent, sequential=load_sequential(results))
    if junit is not None:
        from harness.analysis.junit import write_junit

        write_junit(result, junit)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        _console().print(comparison_table(result))
        counts = ", ".join(f"{v} {k}" for k, v in result.verdict_counts().items()) or "none"
        click.echo(f"{len(result.cells)} comparisons: {counts}")
        for line in result.differences:
            click.echo(f"not the same work: {line}")
        for line in _gate_lines(result):
            click.echo(line)
    if not result.passed:
        sys.exit(1)


@click.command("history")
@RESULTS
@click.option("--metric", default="tg_tps", show_default=True, help="Metric to follow.")
@click.option("--device", default=None, help="Only this serial (or device model).")
@click.option("--cell", "config_id", default=None, metavar="CONFIG_ID", help="Only this config.")
@click.option("--build", "builds", multiple=True, help="Only these builds (repeatable).")
@click.option("--exclude-build", "exclude", multiple=True,
              help="Leave out a build, e.g. the reference run next to the nightly (repeatable).")
@click.option("--engine", "engines", multiple=True, metavar="ENGINE",
              help="Only these engines (repeatable); each engine is its own series anyway.")
@JSON
def history_command(results: Path, metric: str, device: str | None, config_id: str | None,
                    builds: tuple[str, ...], exclude: tuple[str, ...], engines: tuple[str, ...],
                    as_json: bool) -> None:
    """Nightly medians per device, config and engine, and the change points in them.

    Each change point names the nights and builds on either side, its size and its p-value; a
    level shift is reported once.

    \b
    Example:
      harness history --metric tg_tps
      harness history --device SYN0000 --exclude-build release --json
    """
    from harness.analysis.trend import nightly_history

    series = nightly_history(load_trials(results), metric, device=device, config_id=config_id,
                             builds=builds, exclude_builds=exclude, engines=engines)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "metric": metric,
                               "series": [s.to_json() for s in series]}, indent=2))
        return
    table = Table(title=f"change points in {metric}")
    for name in ("device", "config", "engine", "first night", "builds", "change", "p"):
        table.add_column(name)
    changes = [(s, c) for s in series for c in s.changes]
    for s, c in changes:
        table.add_row(escape(s.device), escape(s.label), escape(s.engine), c.night_after,
                      f"{c.build_before} -> {c.build_after}", f"{c.magnitude * 100:+.1f}%",
                      f"{c.p_value:.2g}")
    if changes:
        _console().print(table)
    click.echo(f"{len(series)} series, {len(changes)} change points")


@click.command("recommend")
@click.option("--device", "device_name", required=True, metavar="SERIAL_OR_PROFILE",
              help="A serial in the store, or a device profile name (devices/NAME.yaml).")
@RESULTS
@click.option("--reserve", default=f"{DEFAULT_RESERVE_BYTES >> 20}MiB", show_default=True,
              help="Memory left free for the rest of the phone.")
@click.option("--memory", default=None, metavar="SIZE",
              help="Available memory, instead of the profile's or the estimate.")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)), default="tg_tps",
              show_default=True,
              help="What to rank by: tg_tps / pp_tps (highest median tok/s of burst trials), "
                   "ttft (lowest), sustained_tg (highest median sustained tok/s of sustained "
                   "trials), energy (lowest median J per generated token, valid energy only).")
@click.option("--max-quality-loss", type=float, default=None, metavar="KL",
              help="Largest KL divergence (nats, from `harness quality`) allowed: the weight "
                   "file's KL plus, for a quantised KV cache, its KL at the nearest measured "
                   "depth not above n_ctx (`harness quality --kv`).")
@click.option("--matrix", type=click.Path(path_type=Path), default=None,
              help="Also rank cells of this matrix that were not measured (predicted).")
@click.option("--build", "builds", multiple=True, metavar="BUILD",
              help="Only candidates of this build (repeatable; default: every build).")
@click.option("--engine", "engines", multiple=True, metavar="ENGINE",
              help="Only candidates run by this engine (repeatable; default: every engine).")
@click.option("--allow-paging", is_flag=True,
              help="Rank configs whose mmap'd weights page from storage (bigger than the "
                   "phone's free memory) by speed with the others, not after those that fit.")
@click.option("--require-output-check", is_flag=True,
              help="Only configs whose trials all passed the output check (their greedy "
                   "tokens matched the host reference); unchecked ones and planned cells are "
                   "left out, with the reason.")
@click.option("--top", default=10, show_default=True, help="Picks to show.")
@JSON
def recommend_command(device_name: str, results: Path, reserve: str, memory: str | None,
                      objective: str, max_quality_loss: float | None, matrix: Path | None,
                      builds: tuple[str, ...], engines: tuple[str, ...], allow_paging: bool,
                      require_output_check: bool, top: int, as_json: bool) -> None:
    """Rank the configs that fit this device without OOM or throttling, best first.

    A pick is a whole configuration: the config's knobs, the build and the engine that ran it;
    each (config, build, engine) measured on the device is a candidate of its own. Candidates
    that fit but lack the objective's figure (no sustained trial, energy invalid or not
    measured) are listed as not ranked, with the reason. Configs that ran (or, with --matrix,
    would run) by paging their mmap'd weights from storage come after those that fit, each
    with the bytes a token reads and its storage-bound speed, unless --allow-paging.

    \b
    Example:
      harness recommend --device midrange-8gb
      harness recommend --device SYN0000 --reserve 1GiB --objective pp_tps --json
      harness recommend --device SYN0000 --build release --engine llama-bench
      harness recommend --device SYN0000 --objective sustained_tg
      harness recommend --device SYN0000 --objective energy --json
      harness recommend --device 127.0.0.1:40123 --allow-paging
      harness recommend --device SYN0000 --require-output-check
    """
    from harness.analysis.offload_peak import driver_costs
    from harness.analysis.recommend import cached_kv_evidence, cached_scores, recommend_device

    trials = load_device_trials(results, device_name)
    reserve_bytes = parse_size(reserve, "--reserve")
    rec, target = recommend_device(
        trials, device_name, reserve_bytes=reserve_bytes,
        memory_bytes=parse_size(memory, "--memory") if memory else None,
        predictions_for=(lambda available: _predictions(
            matrix, available, reserve_bytes, _storage_speed(trials, device_name),
            driver_costs(trials, device_name)))
        if matrix else None,
        objective=objective, max_quality_loss=max_quality_loss,
        quality=cached_scores(trials), kv_quality=cached_kv_evidence(), builds=builds,
        engines=engines, allow_paging=allow_paging,
        require_output_check=require_output_check)
    if as_json:
        # one line, by json's C encoder: a farm year's 10,000 picks took 1.2 s to indent
        click.echo(json.dumps({**rec.to_json(), "memory_source": target.source}))
        return
    click.echo(f"{device_name}: {target.source}")
    console = _console()
    if rec.picks:
        console.print(_picks_table(rec, device_name, top))
    if rec.unranked:
        console.print(_unranked_table(rec, top))
    for note in rec.notes:
        click.echo(f"note: {note}")
    unranked = f", {len(rec.unranked)} not ranked by {objective}" if rec.unranked else ""
    pages = sum(p.paging for p in rec.picks)
    paging = f" ({pages} by paging their weights)" if pages else ""
    click.echo(f"{len(rec.picks)} configs fit{paging}, {len(rec.rejected)} rejected"
               f"{unranked}; Pareto front: {len(rec.pareto)}")
    if rec.suggestion is not None:
        click.echo(f"nothing fits; turn {rec.suggestion.knob} first: {rec.suggestion.text}")


#: objective -> its extra columns in the picks table: (title, Pick attribute, digits)
_OBJECTIVE_COLUMNS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "sustained_tg": (("sustained t/s", "sustained_tg_tps", 1),
                     ("steady", "steady_state_ratio", 2),
                     ("throttle s", "time_to_throttle_s", 0)),
    "energy": (("J/gen tok", "tg_j_per_token", 3), ("J/prompt tok", "pp_j_per_token", 4)),
}


def _picks_table(rec: Recommendation, device_name: str, top: int) -> Table:
    extra = _OBJECTIVE_COLUMNS.get(rec.objective, ())
    table = Table(title=f"recommended for {escape(device_name)} (objective {rec.objective})")
    for name in ("#", "config", "build", "engine", "tg t/s", "pp t/s", "ttft ms",
                 *(title for title, _, _ in extra), "peak", "headroom", "source", "output"):
        table.add_column(name)
    table.add_column("why", overflow="fold")
    for p in rec.picks[:top]:
        table.add_row(str(p.rank), escape(p.label), escape(p.build_id), escape(p.engine),
                      _fmt(p.tg_tps), _fmt(p.pp_tps), _fmt(p.ttft_ms),
                      *(_fmt(getattr(p, attr), digits) for _, attr, digits in extra),
                      _fmt(p.peak_bytes, size=True), _fmt(p.headroom_bytes, size=True),
                      p.source, p.output_check, escape(p.explanation))
    return table


def _unranked_table(rec: Recommendation, top: int) -> Table:
    shown = f", the first {top}" if len(rec.unranked) > top else ""
    table = Table(title=f"fit but not ranked by {rec.objective} ({len(rec.unranked)}{shown})")
    for name in ("config", "build", "engine"):
        table.add_column(name)
    table.add_column("why not", overflow="fold")
    for u in rec.unranked[:top]:
        table.add_row(escape(u.label), escape(u.build_id), escape(u.engine), escape(u.reason))
    return table


def _predictions(matrix: Path, available: int | None, reserve: int,
                 storage_mb_s: float | None, drivers: dict[str, int]) -> list[Any]:
    from harness.matrix import expand, load_matrix
    from harness.plan import matrix_repack, plan_cells, resolve_models

    loaded = load_matrix(matrix)
    cells = expand(loaded)
    return plan_cells(cells, resolve_models(loaded, cells), available or 0, reserve,
                      loaded.timeout.trial_s, repack=matrix_repack(loaded),
                      storage_mb_s=storage_mb_s, drivers=drivers)


def _storage_speed(trials: Any, device: str) -> float | None:
    """The device's storage read speed: what its trials recorded, else its profile's."""
    if "storage_read_mb_s" in trials:
        mine = trials[(trials["device_serial"] == device) | (trials["device_model"] == device)]
        speeds = mine["storage_read_mb_s"].dropna()
        if not speeds.empty:
            return float(speeds.median())
    from harness.errors import ConfigError
    from harness.profiles import find_profile

    try:
        return find_profile(device).storage_read_mb_s
    except ConfigError:
        return None


@click.command("quality")
@click.option("--size", "--ladder", "size", type=click.Choice(["tiny", "bench", "gemma3-270m"]),
              default="tiny", show_default=True,
              help="Which ladder to score: a synthetic one (tiny, bench) on a seeded token "
                   "sequence, or the real Gemma 3 270M ladder on a real English text.")
@click.option("--tokens", default=128, show_default=True,
              help="Length of the token sequence (synthetic ladders).")
@click.option("--windows", type=click.IntRange(1), default=None,
              help="Real ladder: score only the first N windows of 512 tokens [default: all].")
@click.option("--kv", "kv_specs", multiple=True, metavar="TYPES",
              help="KV cache types to cross with --quant and --depth instead of scoring the "
                   "weight ladder: f16, q8_0, q4_0 ... or K/V such as q8_0/q4_0 (comma list or "
                   f"repeatable) [default with --depth: {','.join(DEFAULT_KV)}].")
@click.option("--depth", "depth_specs", multiple=True, metavar="TOKENS",
              help="KV cross: tokens read before the scored window (comma list or repeatable) "
                   f"[default: {','.join(map(str, DEFAULT_DEPTHS))}].")
@click.option("--quant", "quant_specs", multiple=True, metavar="QUANT",
              help="KV cross: weight files of the ladder (comma list or repeatable) "
                   "[default: Q8_0].")
@click.option("--window", type=int, default=DEFAULT_WINDOW, show_default=True,
              help="KV cross: tokens scored after the depth, at each place.")
@click.option("--gen-tokens", type=int, default=DEFAULT_GEN_TOKENS, show_default=True,
              help="KV cross: tokens generated greedily from the depth at each place "
                   "(repetition figures).")
@click.option("--positions", type=int, default=None, metavar="N",
              help="KV cross: places per depth, evenly spaced through the text (one scored "
                   f"window and one continuation each) [default: {DEFAULT_POSITIONS}].")
@click.option("--text", "text_file", type=click.Path(path_type=Path), default=None,
              metavar="FILE",
              help="KV cross: a UTF-8 text of your own domain to read instead of CPython's "
                   "pydoc topics (at least depth + N x window tokens).")
@JSON
def quality_command(size: str, tokens: int, windows: int | None, kv_specs: tuple[str, ...],
                    depth_specs: tuple[str, ...], quant_specs: tuple[str, ...], window: int,
                    gen_tokens: int, positions: int | None, text_file: Path | None,
                    as_json: bool) -> None:
    """KL divergence, top-1 agreement (and, on a real text, perplexity) of each quant against
    the ladder's F16, measured on this host with llama-cpp-python and cached beside the models.

    With --kv or --depth, the KV cross instead: each weight quant x KV type x depth is measured
    at --positions places evenly spaced through the text (CPython's pydoc topics, or --text
    FILE). At each place the model reads DEPTH tokens, the next --window tokens are scored
    against f16 KV at the same place and weights (KL, top-1, perplexity, pooled over the
    places), and --gen-tokens tokens are generated greedily from there. A continuation loops
    when at least half of its 4-grams occurred earlier in it; each KV type shows how many of
    its continuations loop and their median repeated 4-gram share, beside f16's.

    \b
    Example:
      harness quality --size tiny
      harness quality --ladder gemma3-270m          # the Gemma terms, about 5 minutes
      harness quality --size bench --json
      harness quality --ladder gemma3-270m --kv f16,q8_0,q4_0 --depth 6144
      harness quality --ladder gemma3-270m --kv f16,q8_0,q4_0 --depth 4096 --text notes.txt
    """
    from harness.analysis.quality import ensure_quality

    say = lambda text: click.echo(text, err=True)  # noqa: E731
    if kv_specs or depth_specs:
        _kv_quality(size, kv_specs, depth_specs, quant_specs, window, gen_tokens,
                    DEFAULT_POSITIONS if positions is None else positions, text_file, as_json,
                    say)
        return
    for given, option in ((quant_specs, "--quant"), (text_file, "--text"),
                          (positions is not None, "--positions")):
        if given:
            raise ConfigError(f"{option} is an option of the KV cross: give --kv or --depth "
                              "too, e.g. --kv f16,q4_0 --depth 4096")
    scores, path, measured = ensure_quality(size, n_tokens=tokens, windows=windows,
                                            progress=say)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "ladder": size, "file": str(path),
                               "measured_now": measured,
                               "scores": [vars(s) for s in scores]}, indent=2))
        return
    text = scores[0].text if scores and scores[0].text else None
    what = f"{scores[0].positions} scored tokens of {text}" if text else f"{tokens} tokens"
    table = Table(title=f"quality of the {size} ladder against F16 ({what})")
    columns = ["quant", "KL mean", "KL max", "top-1"] + (["PPL"] if text else [])
    for name in columns:
        table.add_column(name, justify="left" if name == "quant" else "right")
    for s in scores:
        row = [s.quant, f"{s.kl:.5f}", f"{s.kl_max:.5f}", f"{s.top1:.1%}"]
        if text:
            row.append(f"{s.ppl:.3f}" if s.ppl is not None else "-")
        table.add_row(*row)
    _console().print(table)
    click.echo(f"{'measured' if measured else 'cached'}: {path}")


def _kv_quality(size: str, kv_specs: tuple[str, ...], depth_specs: tuple[str, ...],
                quant_specs: tuple[str, ...], window: int, gen_tokens: int, positions: int,
                text_file: Path | None, as_json: bool, say: Any) -> None:
    from harness.analysis.kv_loss import loop_summary, one_build, parse_depths, parse_kv_types
    from harness.analysis.kv_loss_measure import KvRequest, ensure_kv_quality

    quants = tuple(dict.fromkeys(q.strip() for spec in quant_specs or ("Q8_0",)
                                 for q in spec.split(",") if q.strip()))
    request = KvRequest(size, quants, parse_kv_types(kv_specs or DEFAULT_KV),
                        parse_depths(depth_specs or map(str, DEFAULT_DEPTHS)), window,
                        gen_tokens, positions, text_file)
    result = ensure_kv_quality(request, progress=say)
    build = one_build(result.cells)
    loops = [loop_summary(c, result.baselines.get((c.quant, c.depth))) for c in result.cells]
    own = result.text_repetition
    definition = (f"a continuation loops when at least {LOOP_THRESHOLD:.0%} of its "
                  f"{LOOP_NGRAM}-grams occurred earlier in it")
    if as_json:
        click.echo(json.dumps({
            "schema_version": 2, "ladder": size, "file": str(result.path),
            "measured_now": result.measured, "text": result.text,
            "text_tokens": result.text_tokens, "build": vars(build),
            "positions": {"per_depth": positions,
                          "offsets": {str(d): list(o) for d, o in result.offsets.items()},
                          "how": "evenly spaced start offsets in the text, each reading "
                                 "depth tokens (BOS, then the text from the offset)"},
            "loop_definition": {"ngram": LOOP_NGRAM, "threshold": LOOP_THRESHOLD,
                                "text": definition},
            "text_repetition": vars(own) if own is not None else None,
            "cells": [{**c.to_json(), "loops": summary}
                      for c, summary in zip(result.cells, loops, strict=True)]}, indent=2))
        return
    table = Table(title=f"KV cache quality of the {size} ladder against f16 KV at the same "
                        f"places ({positions} places per depth, {window} scored tokens and "
                        f"{gen_tokens} generated at each, of {result.text})")
    for name in ("quant", "kv", "depth", "KL mean", "KL max", "top-1", "PPL", "looping",
                 "f16 looping", "median rep. 4-gram", "f16 median"):
        table.add_column(name, justify="left" if name in ("quant", "kv") else "right")
    for c, summary in zip(result.cells, loops, strict=True):
        ref = summary.get("f16", {})
        table.add_row(c.quant, c.kv, str(c.depth), f"{c.kl:.5f}", f"{c.kl_max:.4f}",
                      f"{c.top1:.1%}", f"{c.ppl:.3f}",
                      f"{summary['looping']} of {summary['continuations']}",
                      f"{ref['looping']} of {ref['continuations']}" if ref else "-",
                      f"{summary['median_repeated_4gram']:.1%}",
                      f"{ref['median_repeated_4gram']:.1%}" if ref else "-")
    table.caption = escape(build.label)
    _console().print(table)
    click.echo(f"{definition}.")
    if own is not None and own.stretches:
        click.echo(f"the text itself: {own.looping} of its {own.stretches} stretches of "
                   f"{own.length} tokens would count as looping (median repeated "
                   f"{LOOP_NGRAM}-gram share {own.median_repeated_4gram:.1%}).")
    click.echo(f"{result.measured} cells measured now, {len(result.cells) - result.measured} "
               f"cached: {result.path}")


@click.command("export")
@click.option("--format", "fmt", type=click.Choice(["llama-bench-jsonl", "llama-bench-sql"]),
              required=True, help="JSONL lines or a SQLite database, as llama-bench writes.")
@RESULTS
@click.option("--run", "run_id", default=None, metavar="RUN_ID", help="Only this run.")
@click.option("--build-key", type=click.Choice(["short", "id", "commit"]), default="short",
              show_default=True,
              help="What goes in build_commit: short (one 7-digit identifier per build, its "
              "commit where no other build shares it; printed), the harness build id, or the "
              "engine's commit.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="File to write.")
@BUILDS_OPTION
def export_command(fmt: str, results: Path, run_id: str | None, build_key: str,
                   output: Path, builds_dir: Path | None) -> None:
    """Write trials in the schema llama.cpp's scripts/compare-llama-bench.py reads.

    \b
    Each build's identifier in build_commit is printed: pass those to the script's -b and -c.

    \b
    Example:
      harness export --format llama-bench-sql -o bench.sqlite
      compare-llama-bench.py -i bench.sqlite -b 0c1e570 -c 5d2a9f1
    """
    from harness.analysis.interop import BuildKey, build_identifiers, export, exported_rows
    from harness.artifacts.builds import builds_root, list_builds

    trials = load_trials(results)
    key: BuildKey = "commit" if build_key == "commit" else "id" if build_key == "id" else "short"
    # each build's backends, for llama-bench's ``backends`` (a build not here: its trials' device)
    builds = {b.name: b.manifest.backends for b in list_builds(builds_root(builds_dir))}
    count = export(trials, fmt, output, run_id=run_id, build_key=key, builds=builds)
    if key == "short":
        for named in build_identifiers(exported_rows(trials, run_id)).values():
            click.echo(f"build {named.build_id} -> {named.identifier} ({named.source})")
    click.echo(f"wrote {count} llama-bench records to {output}")


@click.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@RESULTS
@click.option("--device", default=None, help="Device serial to file them under "
              "(default: imported).")
@click.option("--run-id", default=None, help="Run id of the imported trials.")
def import_command(source: Path, results: Path, device: str | None, run_id: str | None) -> None:
    """Bring llama-bench results (JSONL, JSON, `-o sql` text or SQLite) into the store.

    \b
    Example:
      harness import laptop.jsonl --device my-laptop
    """
    from harness.analysis.importing import to_trials
    from harness.analysis.interop import default_run_id, read_llama_bench
    from harness.store import write_part

    if not source.is_file():
        raise ConfigError(f"{source}: no such file")
    run = run_id or default_run_id()
    trials = to_trials(read_llama_bench(source), run_id=run, device=device)
    write_part(results, "trials", trials, run)
    click.echo(f"imported {len(trials)} trials into {results} (run id {run})")


def make_runner(devices_spec: str, profile: str) -> Runner:
    """The real runner: ``harness run``'s device handling and ``execute`` (tests replace it)."""
    from harness.run.devices import open_devices
    from harness.run.runner import RunOptions, execute

    def run(matrix: Path, results: Path) -> Any:
        with open_devices(devices_spec, profile, None) as devices:
            return execute(matrix, devices, RunOptions(results=results))

    return run


def report_step() -> Reporter | None:
    """Write the dated report of the night's run (what `harness report --run` writes)."""
    if importlib.util.find_spec("harness.report") is None:
        return None

    def write(results: Path, run_id: str, out: Path) -> Path | None:
        from harness.report import ReportOptions, write_report

        write_report(ReportOptions(results=results, run_id=run_id), out)
        return out

    return write


@click.command("nightly")
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--baseline", required=True, metavar="BUILD", help="Reference build id.")
@click.option("--devices", "devices_spec", default="all", show_default=True,
              help="Comma-separated serials, 'all' attached devices, or sim:N virtual phones.")
@click.option("--profile", default="midrange-8gb", show_default=True,
              help="Profile of phones started by --devices sim:N.")
@RESULTS
@GATE
@click.option("--metric", "metric_text", default=_DEFAULT_METRICS, show_default=True,
              help="Metrics to compare and follow.")
@click.option("--reports", type=click.Path(path_type=Path), default=Path("reports"),
              show_default=True, help="Folder of the dated report and the alert document.")
@click.option("--alerts", "alerts_file", type=click.Path(path_type=Path), default=None,
              metavar="FILE.json",
              help="The night's alert document (JSON; the Markdown is beside it, .md). "
                   "[default: REPORTS/nightly-NIGHT-alerts.json]")
@click.option("--on-alert", "on_alert", metavar="CMD", default=None,
              help="Shell command run once after the alert document is written, only when it "
                   "lists something; the JSON document's path replaces {} in CMD, or is "
                   "appended as its last argument. Its failure is one line on stderr and does "
                   "not change the exit code.")
@click.option("--on-alert-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="SECONDS", help="Time --on-alert CMD may take.")
@click.option("--site", "site_dir", type=click.Path(path_type=Path), default=None,
              metavar="DIR", help="Bring the farm dashboard in DIR up to date after the night "
              "(`harness site build --results RESULTS -o DIR --reports REPORTS --baseline "
              "BUILD`: the baseline is the site's reference build); checked before the run. A "
              "failure is one line on stderr and does not change the exit code.")
@JSON
def nightly_command(matrix: Path, baseline: str, devices_spec: str, profile: str, results: Path,
                    gate_specs: tuple[str, ...], metric_text: str, reports: Path,
                    alerts_file: Path | None, on_alert: str | None, on_alert_timeout: float,
                    site_dir: Path | None, as_json: bool) -> None:
    """Run MATRIX, compare with the baseline and the previous night, report, write the alert
    document, exit by the gates.

    \b
    Example:
      harness nightly matrices/nightly.yaml --baseline release --gate tg_tps:-3%
      harness nightly matrices/smoke.yaml --baseline host-release --devices sim:2
      harness nightly matrices/nightly.yaml --baseline release --on-alert 'scripts/notify {}'
      harness nightly matrices/nightly.yaml --baseline release --site /srv/www/farm
    """
    if not matrix.is_file():
        raise ConfigError(f"{matrix}: no such matrix file")
    if alerts_file is not None and alerts_file.suffix != ".json":
        raise ConfigError(f"--alerts {alerts_file}: name a .json file (the Markdown is written "
                          "beside it, with .md)")
    gates = canonical_gates(gate_specs)
    if site_dir is not None:
        from harness.site.build import read_manifest

        read_manifest(site_dir)  # a folder that is not our site: refused before the night runs
    result = run_nightly(matrix, baseline=baseline, results=results,
                         run=make_runner(devices_spec, profile), gates=gates,
                         metrics=parse_metrics(metric_text), report=report_step(),
                         reports_dir=reports)
    alerts = result.alerts or AlertDocument(result.run_id, result.night)
    doc_path, _ = write_alerts(alerts, alerts_file or alerts_path(reports, result.night))
    if on_alert is not None and alerts.listed:
        failure = run_on_alert(on_alert, doc_path, on_alert_timeout)
        if failure is not None:
            click.echo(f"warning: {failure}", err=True)
    site = _nightly_site(results, site_dir, reports, baseline) if site_dir is not None else None
    if as_json:
        click.echo(json.dumps({**result.to_json(), "alerts": {
            "path": str(doc_path), **alerts.counts(), "listed": alerts.listed},
            "site": site}, indent=2))
    else:
        console = _console()
        for comparison in result.comparisons:
            console.print(comparison_table(comparison.result, comparison.title))
            for line in _gate_lines(comparison.result):
                click.echo(line)
        for series, change in result.changes():
            click.echo(f"change point: {series.device} {series.label}: "
                       f"{change.describe(series.metric)}")
        for note in result.notes:
            click.echo(f"note: {note}")
        if result.report is not None:
            click.echo(f"report: {result.report}")
        click.echo(f"alerts: {doc_path} ({alerts.listed} listed)")
        if site is not None and "error" not in site:
            click.echo(f"site: {site['output']} ({site['written']} files written, "
                       f"{site['unchanged']} unchanged, {site['seconds']:.1f} s)")
        click.echo(f"night {result.night} (run {result.run_id}): "
                   f"{'gates passed' if result.passed else 'a gate failed'}")
    if not result.passed:
        sys.exit(1)


def _nightly_site(results: Path, site_dir: Path, reports: Path, baseline: str
                  ) -> dict[str, Any]:
    """The dashboard brought up to date after a night, with the night's baseline as the
    site's reference build; a failure is a warning, not the exit code (the night's results and
    alert document are already written)."""
    from harness.site.build import build_site, manifest_references

    try:
        references = tuple(dict.fromkeys((baseline, *manifest_references(site_dir))))
        built = build_site(results, site_dir, reports=reports if reports.is_dir() else None,
                           references=references)
    except HarnessError as error:
        click.echo(f"warning: --site {site_dir}: the dashboard was not updated: {error}",
                   err=True)
        return {"output": str(site_dir), "error": str(error)}
    out = built.to_json()
    out.pop("pages_written", None)
    return out


@click.command("noise")
@RESULTS
@click.option("--device", default=None, help="Only this serial (or device model).")
@click.option("--metric", "metric_text", default=_DEFAULT_METRICS, show_default=True,
              help=f"Comma-separated metrics: {_METRIC_NAMES}.")
@click.option("--reps", type=int, default=None, metavar="N",
              help="Repetitions per side the detectable change assumes "
                   "[default: each cell's usual trials per night].")
@click.option("--nights", "nights_back", type=int, default=7, show_default=True, metavar="K",
              help="The cell's K most recent nights the CV rests on.")
@click.option("--include-throttled", is_flag=True,
              help="Keep throttled trials (excluded by default).")
@JSON
def noise_command(results: Path, device: str | None, metric_text: str, reps: int | None,
                  nights_back: int, include_throttled: bool, as_json: bool) -> None:
    """Noise floor per phone and cell: robust CV and the smallest change a comparison can see.

    The CV is 1.4826 x MAD / median per build and night, the median over the cell's recent
    nights; the minimum detectable change is for a two-sided comparison with N repetitions per
    side at alpha 0.05 and 80% (95%) power (docs/statistics.md, "Noise floor").

    \b
    Example:
      harness noise
      harness noise --device SYN0000 --reps 10 --metric tg_tps --json
    """
    from harness.analysis.noise import noise_floors

    if reps is not None and reps < 1:
        raise ConfigError(f"--reps {reps}: give at least 1 repetition per side, e.g. --reps 10")
    if nights_back < 1:
        raise ConfigError(f"--nights {nights_back}: give at least 1 night, e.g. --nights 7")
    metrics = parse_metrics(metric_text)
    floors = noise_floors(load_trials(results), metrics, nights_back=nights_back, reps=reps,
                          device=device, include_throttled=include_throttled)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "metrics": list(metrics),
                               "nights": nights_back, "reps": reps,
                               "cells": [f.to_json() for f in floors]}, indent=2))
        return
    table = Table(title="noise floor per phone and cell")
    for name in ("device", "config", "engine", "metric", "CV", "nights", "trials", "reps",
                 "MDC 80%", "MDC 95%"):
        table.add_column(name, justify="left" if name in ("device", "config", "engine",
                                                          "metric") else "right")
    for f in floors:
        table.add_row(escape(f.device), escape(f.label), escape(f.engine), f.metric,
                      f"{f.cv:.2%}", str(f.nights), str(f.trials), str(f.reps),
                      f"{f.mdc_80:.1%}", f"{f.mdc_95:.1%}")
    if floors:
        _console().print(table)
    click.echo(f"{len(floors)} cells with a noise floor (a night needs at least 3 usable trials)")


COMMANDS: list[click.Command] = [
    compare_command, history_command, recommend_command, quality_command, export_command,
    import_command, nightly_command, noise_command,
]
