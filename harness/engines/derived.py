"""What a generic engine reads from output: metrics, captures, summaries, units, key paths and
derived-metric expressions, and their loading from the YAML's ``output`` mapping.

An expression is arithmetic over named captures, e.g. ``prompt_tokens / (prompt_eval_end -
inference_start)``: names, numbers, ``+ - * /``, unary minus and parentheses, nothing else. It is
parsed with ``ast`` into a small tree of our own and evaluated by walking that tree; no Python
code is ever run. Pure functions, no I/O.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

# Seconds per unit of a time value (a rate "per ms" is divided by 0.001 to get "per s").
TIME_UNITS: Mapping[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
# Bytes per unit of a memory value.
BYTE_UNITS: Mapping[str, float] = {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9,
                                   "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3}

# The metrics a generic engine maps, by what their values are: rates (tokens per second; a unit
# names the time in the denominator), times (to seconds) and memory (to bytes).
RATE_METRICS = ("prompt_tps", "gen_tps", "prompt_tps_sd", "gen_tps_sd")
TIME_METRICS = ("ttft", "load")
BYTE_METRICS = ("peak_memory",)
METRICS = (*RATE_METRICS, *TIME_METRICS, *BYTE_METRICS)
CAPTURE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}

# A node of a parsed expression: ("num", value), ("name", text), ("neg", node) or
# (operator, left, right) with the operator one of + - * /.
Node = tuple[Any, ...]


class ExpressionError(ValueError):
    """An expression uses something other than names, numbers, + - * / and parentheses."""


@dataclass(frozen=True)
class Expression:
    """A parsed derived-metric expression; ``names`` are the captures it reads."""

    text: str
    tree: Node
    names: frozenset[str]

    def evaluate(self, values: Mapping[str, float]) -> float | None:
        """The value, or None when a name has no value or a divisor is 0 (an interval the tool
        could not time). A capture that was infinite or NaN carries through, for the validity
        gates to catch."""
        try:
            return _evaluate(self.tree, values)
        except (KeyError, ZeroDivisionError, OverflowError):
            return None


def parse_expression(text: str) -> Expression:
    """Parse ``text``; raises ExpressionError saying what is not allowed."""
    try:
        body = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ExpressionError(f"is not an expression ({error.msg})") from None
    tree = _convert(body)
    return Expression(text, tree, frozenset(_names(tree)))


def _convert(node: ast.AST) -> Node:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return (_OPS[type(node.op)], _convert(node.left), _convert(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _convert(node.operand)
        return ("neg", inner) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(
            node.value, bool):
        return ("num", float(node.value))
    raise ExpressionError(f"may use names, numbers, + - * / and parentheses only, not "
                          f"{ast.unparse(node)!r}")


def _names(tree: Node) -> set[str]:
    if tree[0] == "name":
        return {tree[1]}
    if tree[0] == "num":
        return set()
    return set().union(*(_names(child) for child in tree[1:]))


def _evaluate(tree: Node, values: Mapping[str, float]) -> float:
    kind = tree[0]
    if kind == "num":
        return float(tree[1])
    if kind == "name":
        return values[tree[1]]
    if kind == "neg":
        return -_evaluate(tree[1], values)
    left, right = _evaluate(tree[1], values), _evaluate(tree[2], values)
    if kind == "+":
        return left + right
    if kind == "-":
        return left - right
    if kind == "*":
        return left * right
    return left / right


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted key path (``stats.decode.tps``, ``runs.0.tps``), or None.

    A key that itself holds dots is found first as it is written.
    """
    if isinstance(data, Mapping) and path in data:
        return data[path]
    current = data
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and \
                -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


def number(value: Any) -> float | None:
    """A float from a JSON value or a matched text, else None. An infinite or NaN value is
    kept as the tool printed it: an impossible figure is for the validity gates to catch
    (harness.run.validity), not to be read as a missing one."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Aggregate:
    """What marks the tool's summary over repetitions (one Measurement, not a repetition)."""

    marker: str = ""  # regex: the summary starts at this pattern's first match
    key: str = ""  # jsonl: a record holding this key path (not null or false) is the summary
    equals: tuple[Any, ...] = ()  # jsonl: ... or holding this one value there


@dataclass(frozen=True)
class Metric:
    """Where one value comes from, and the factor that brings it to the store's unit."""

    source: str  # JSON key path (jsonl) or a regex with one group (regex); "" with expr
    scale: float = 1.0  # the YAML's scale times the unit's conversion
    expr: Expression | None = None  # a derived metric: arithmetic over captures


def metric_from_spec(spec: Any, key: str, fmt: str, where: Path | str,
                     captures: Mapping[str, Metric] | None = None) -> Metric:
    """A metric (``captures`` given: the names its expression may read) or a capture (None).

    ``spec`` is a key path / pattern, or a mapping with ``key`` (jsonl) / ``pattern`` (regex)
    or ``expr`` (metrics only), and optional ``scale`` and ``unit``.
    """
    source_key = "key" if fmt == "jsonl" else "pattern"
    scale: Any = 1.0
    unit: Any = None
    text: Any = None
    if isinstance(spec, Mapping):
        allowed = {source_key, "scale", "unit"} | ({"expr"} if captures is not None else set())
        unknown = sorted(set(spec) - allowed, key=str)
        if unknown:
            raise ConfigError(f"{where}: key '{key}.{unknown[0]}' is unknown; use "
                              f"{', '.join(sorted(allowed))}")
        source, text = spec.get(source_key), spec.get("expr")
        scale, unit = spec.get("scale", 1.0), spec.get("unit")
    else:
        source = spec
    if text is not None:
        if source is not None:
            raise ConfigError(f"{where}: key {key!r} has both {source_key} and expr; give one")
        expr = _expression(text, f"{key}.expr", where, captures or {})
        return Metric("", float(_scale(scale, key, where)) * _factor(unit, key, where), expr)
    if not isinstance(source, str) or not source:
        raise ConfigError(f"{where}: key {key!r} must be a string or a mapping with "
                          f"key/pattern{'/expr' if captures is not None else ''}")
    if fmt == "regex":
        try:
            groups = re.compile(source, re.MULTILINE).groups
        except re.error as error:
            raise ConfigError(f"{where}: key {key!r} is not a valid regex ({error})") from None
        if groups != 1:
            raise ConfigError(f"{where}: key {key!r} must have exactly one (group)")
    return Metric(source, float(_scale(scale, key, where)) * _factor(unit, key, where))


def _scale(scale: Any, key: str, where: Path | str) -> float:
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise ConfigError(f"{where}: key '{key}.scale' must be a number")
    return float(scale)


def _factor(unit: Any, key: str, where: Path | str) -> float:
    """The factor to the store's unit: a time to seconds, a rate per unit to per second, a
    memory figure to bytes; a capture's time or memory unit to seconds or bytes."""
    if unit is None:
        return 1.0
    metric = key.rsplit(".", 1)[-1]
    if metric in RATE_METRICS:
        units: Mapping[str, float] = {u: 1.0 / f for u, f in TIME_UNITS.items()}
    elif metric in TIME_METRICS:
        units = TIME_UNITS
    elif metric in BYTE_METRICS:
        units = BYTE_UNITS
    else:  # a capture
        units = {**TIME_UNITS, **BYTE_UNITS}
    if not isinstance(unit, str) or unit not in units:
        raise ConfigError(f"{where}: key '{key}.unit' must be one of {', '.join(units)}, "
                          f"not {unit!r}")
    return units[unit]


def _expression(text: Any, key: str, where: Path | str,
                captures: Mapping[str, Metric]) -> Expression:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: key {key!r} must be an expression over captures")
    try:
        expr = parse_expression(text)
    except ExpressionError as error:
        raise ConfigError(f"{where}: key {key!r} {error}") from None
    unknown = sorted(expr.names - set(captures))
    if unknown:
        known = ", ".join(captures) or "none declared"
        raise ConfigError(f"{where}: key {key!r} names unknown capture {unknown[0]!r} "
                          f"(output.captures: {known})")
    return expr


def captures_from_spec(data: Any, fmt: str, where: Path | str) -> dict[str, Metric]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: key 'output.captures' must map names to sources")
    captures = {}
    for name, spec in data.items():
        key = f"output.captures.{name}"
        if not isinstance(name, str) or not CAPTURE_NAME.match(name) or name in METRICS:
            raise ConfigError(f"{where}: key {key!r} must be a name (letters, digits, _; "
                              f"starting with a letter) other than a metric's")
        captures[name] = metric_from_spec(spec, key, fmt, where)
    return captures


def aggregate_from_spec(data: Any, fmt: str, where: Path | str) -> Aggregate | None:
    if data is None:
        return None
    if fmt == "regex":
        if not isinstance(data, str) or not data:
            raise ConfigError(f"{where}: key 'output.aggregate' must be a regex marking where "
                              "the summary starts")
        try:
            re.compile(data, re.MULTILINE)
        except re.error as error:
            raise ConfigError(f"{where}: key 'output.aggregate' is not a valid regex "
                              f"({error})") from None
        return Aggregate(marker=data)
    if isinstance(data, str) and data:
        return Aggregate(key=data)
    if isinstance(data, dict) and isinstance(data.get("key"), str) and data["key"] and set(
            data) <= {"key", "equals"}:
        return Aggregate(key=data["key"], equals=(data["equals"],) if "equals" in data else ())
    raise ConfigError(f"{where}: key 'output.aggregate' must be a key path, or a mapping with "
                      "key and optional equals")
