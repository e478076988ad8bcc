"""A YAML-declared engine, for engines without an adapter yet (MNN llm_bench, ExecuTorch, MLC).

The YAML gives an argv template over the cell's fields and an output mapping, e.g.::

    name: mnn-llm-bench
    argv: ["{binary}", "{model}", "-t", "{threads}", "-p", "{n_prompt}", "-n", "{n_gen}"]
    supports:                 # optional: allowed values per cell field
      type_k: [f16]
      affinity: [all]
    output:
      format: regex           # or jsonl: one JSON object per repetition
      prompt_tps: 'prefill speed = ([0-9.]+) tok/s'
      gen_tps: 'decode speed = ([0-9.]+) tok/s'
      ttft: {pattern: 'prefill time = ([0-9.]+) ms', scale: 0.001}   # to seconds

``tool`` (optional) names the binary under the build's ``bin/`` that ``{binary}`` is; it defaults
to the engine's name. Placeholders are ``{binary}``, ``{model}``, ``{cpu_mask}`` and every Cell
field; booleans render as 1/0. For ``jsonl`` the metric values are JSON keys (``{key: ...,
scale: ...}`` to scale); for ``regex`` they are patterns with one group, and the n-th match of
each is repetition n.
Everything is checked when the file is loaded, naming the file and key.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from harness.cell import Cell
from harness.engines.base import (
    Measurement,
    Record,
    affinity_mask,
    common_problem,
    flash_attn_setting,
    require_supported,
)
from harness.errors import ConfigError

METRICS = ("prompt_tps", "gen_tps", "ttft")
FORMATS = ("jsonl", "regex")
CELL_FIELDS = tuple(f.name for f in fields(Cell))
PLACEHOLDERS = ("binary", "model", "cpu_mask", *CELL_FIELDS)


@dataclass(frozen=True)
class Metric:
    source: str  # JSON key (jsonl) or a regular expression with one group (regex)
    scale: float = 1.0


@dataclass(frozen=True)
class GenericRecord:
    values: dict[str, Any]
    raw: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class GenericEngine:
    """An ``Engine`` whose argv and output mapping come from YAML."""

    name: str
    template: tuple[str, ...]
    output_format: str
    metrics: dict[str, Metric]
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tool: str = ""  # the binary under the build's bin/ that {binary} names (default: the name)

    @property
    def binary_name(self) -> str:
        return self.tool or self.name

    def supports(self, cell: Cell) -> str | None:
        common = common_problem(cell)
        if common:
            return common[1]
        for key, values in self.allowed.items():
            if _render(getattr(cell, key)) not in values:
                return f"{self.name} supports {key} in {list(values)}, not {getattr(cell, key)!r}"
        if cell.load_mode and not self.uses("load_mode"):
            return (f"{self.name}'s argv has no {{load_mode}}, so load_mode {cell.load_mode} "
                    "cannot be asked of it")
        if cell.cache and not self.uses("model"):
            return self.cache_problem()
        return None

    def uses(self, placeholder: str) -> bool:
        """The argv template passes this placeholder to the engine."""
        return any("{" + placeholder + "}" in item for item in self.template)

    def cache_problem(self) -> str:
        return (f"{self.name}'s argv has no {{model}}: the harness evicts or warms the model "
                "file it passes, so this engine cannot honour a cache knob")

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        flash, _ = flash_attn_setting(cell)
        values = {key: _render(getattr(cell, key)) for key in CELL_FIELDS}
        values.update(binary=binary_path, model=model_path, flash_attn=str(flash),
                      load_mode=cell.resolved_load_mode)
        values["cpu_mask"] = affinity_mask(cell, cpu_mask) or ""
        return [item.format_map(values) for item in self.template]

    def parse(self, stdout: str) -> list[Record]:
        if self.output_format == "jsonl":
            return list(_parse_jsonl(stdout))
        return list(self._parse_regex(stdout))

    def _parse_regex(self, stdout: str) -> list[GenericRecord]:
        found = {name: list(re.finditer(m.source, stdout)) for name, m in self.metrics.items()}
        reps = max((len(matches) for matches in found.values()), default=0)
        records = []
        for rep in range(reps):
            values: dict[str, Any] = {}
            raw = []
            for name, matches in found.items():
                if rep < len(matches):
                    values[name] = float(matches[rep].group(1))
                    raw.append(matches[rep].group(0))
            records.append(GenericRecord(values, "\n".join(raw)))
        return records

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        out = []
        for rep, record in enumerate(records):
            data = record.as_dict()
            # regex records are keyed by metric name, JSON records by the engine's own keys
            figures = {
                name: _scaled(
                    data.get(name if self.output_format == "regex" else metric.source),
                    metric.scale,
                )
                for name, metric in self.metrics.items()
            }
            out.append(Measurement(rep, figures.get("prompt_tps"), figures.get("gen_tps"),
                                   figures.get("ttft")))
        return out


def _parse_jsonl(stdout: str) -> list[GenericRecord]:
    records = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # a truncated or foreign line
        if isinstance(data, dict):
            records.append(GenericRecord(data, line))
    return records


def _scaled(value: Any, scale: float) -> float | None:
    if value is None:
        return None
    try:
        return float(value) * scale
    except (TypeError, ValueError):
        return None


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def load_generic_engine(path: Path) -> GenericEngine:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    return engine_from_dict(data, path)


def engine_from_dict(data: Any, where: Path | str) -> GenericEngine:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with name, argv and output")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: key 'name' must be a non-empty string")
    template = data.get("argv")
    if not isinstance(template, list) or not template or not all(
        isinstance(item, str | int | float) for item in template
    ):
        raise ConfigError(f"{where}: key 'argv' must be a non-empty list of strings")
    template = [str(item) for item in template]
    for item in template:
        for _, placeholder, _, _ in string.Formatter().parse(item):
            if placeholder is not None and placeholder not in PLACEHOLDERS:
                raise ConfigError(
                    f"{where}: key 'argv' uses {{{placeholder}}}; known: {', '.join(PLACEHOLDERS)}"
                )
    output = data.get("output")
    if not isinstance(output, dict):
        raise ConfigError(f"{where}: key 'output' must be a mapping with format and metrics")
    fmt = output.get("format")
    if fmt not in FORMATS:
        raise ConfigError(f"{where}: key 'output.format' must be one of {', '.join(FORMATS)}")
    metrics = {
        metric: _metric(output[metric], f"output.{metric}", fmt, where)
        for metric in METRICS if metric in output
    }
    unknown = set(output) - {"format", *METRICS}
    if unknown:
        raise ConfigError(f"{where}: key 'output.{sorted(unknown)[0]}' is unknown; use {METRICS}")
    if not metrics:
        raise ConfigError(f"{where}: key 'output' maps none of {', '.join(METRICS)}")
    tool = data.get("tool", "")
    if not isinstance(tool, str) or "/" in tool:
        raise ConfigError(f"{where}: key 'tool' must be a file name under the build's bin/")
    return GenericEngine(name, tuple(template), fmt, metrics,
                         _allowed(data.get("supports") or {}, where), tool)


def _metric(spec: Any, key: str, fmt: str, where: Path | str) -> Metric:
    scale: Any = 1.0
    if isinstance(spec, Mapping):
        source = spec.get("key" if fmt == "jsonl" else "pattern")
        scale = spec.get("scale", 1.0)
    else:
        source = spec
    if not isinstance(source, str) or not source:
        raise ConfigError(f"{where}: key {key!r} must be a string or a mapping with key/pattern")
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise ConfigError(f"{where}: key '{key}.scale' must be a number")
    if fmt == "regex":
        try:
            groups = re.compile(source).groups
        except re.error as error:
            raise ConfigError(f"{where}: key {key!r} is not a valid regex ({error})") from None
        if groups != 1:
            raise ConfigError(f"{where}: key {key!r} must have exactly one (group)")
    return Metric(source, float(scale))


def _allowed(data: Any, where: Path | str) -> dict[str, tuple[str, ...]]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: key 'supports' must map cell fields to lists of values")
    allowed = {}
    for key, values in data.items():
        if key not in CELL_FIELDS:
            raise ConfigError(f"{where}: key 'supports.{key}' is not a cell field")
        if not isinstance(values, list):
            raise ConfigError(f"{where}: key 'supports.{key}' must be a list")
        allowed[key] = tuple(_render(value) for value in values)
    return allowed
