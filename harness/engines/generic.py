"""A YAML-declared engine, for tools without an adapter of their own.

The YAML gives an argv template over the cell's fields and an output mapping, e.g.::

    name: toy-bench
    argv: ["{binary}", "--model", "{model}", "--threads", "{threads}", "--prompt", "{n_prompt}",
           "--gen", "{n_gen}", "--runs", "{repetitions}"]
    supports: {affinity: [all]}          # optional: allowed values per cell field
    output:
      format: regex                      # or jsonl: one JSON object per line
      prompt_tps: 'pp=([0-9.]+) tok/s'
      gen_tps: 'tg=([0-9.]+) tok/s'
      ttft: {pattern: 'first token after ([0-9.]+) ms', unit: ms}

Top-level keys: ``name``, ``argv``, ``output`` (required); ``tool`` (the file under the build's
``bin/`` that ``{binary}`` is; default the name), ``family`` (``llama.cpp`` applies llama.cpp's
knob rules), ``supports``, ``devices`` (backend word per device family or device name),
``values`` (a cell field's value in the tool's words), ``model_files`` (files next to the model
that the tool reads), ``env`` (environment variables), ``prompt_file`` (false: the tool cannot
take one).

Placeholders: ``{binary}``, ``{binary_dir}``, ``{model}``, ``{model_dir}``, ``{cpu_mask}``,
``{device}``, ``{prompt_file}``, ``{output_file}`` and every Cell field; booleans render as 1/0
unless ``values`` says otherwise.

``output``: ``format``; ``stream`` (stdout, stderr, both, or file with ``file``); ``prefix``
(jsonl: the text before each record's JSON); ``captures`` (named values); the metrics
``prompt_tps``, ``gen_tps``, ``ttft``, ``load``, ``peak_memory``, ``prompt_tps_sd``,
``gen_tps_sd``, each a key path / pattern or ``{expr: ..., unit: ...}`` over captures;
``ttft_definition``; ``aggregate`` (what marks the tool's summary) and ``per_repetition``.
For jsonl a source is a dotted key path (``stats.decode.tps``, ``runs.0.tps``); for regex a
pattern with one group (compiled multi-line, so ``^`` is a line start); the matches are cut
into repetitions by the order a repetition prints its lines (``repetition_blocks``), so a
repetition missing a line lacks that figure alone. Everything is checked when the file is
loaded (``harness.engines.generic_yaml``); an error names the file and key.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from harness import knobs
from harness.cell import Cell
from harness.engines.base import (
    EngineOutput,
    Measurement,
    Record,
    affinity_mask,
    as_output,
    common_problem,
    context_reason,
    device_family,
    flash_attn_setting,
    require_supported,
    sustained_problem,
)
from harness.engines.derived import (
    Aggregate,
    Metric,
    lookup,
    number,
)
from harness.errors import EngineError

LLAMA_CPP = "llama.cpp"
CELL_FIELDS = tuple(f.name for f in fields(Cell) if f.name != "extra")  # not a knob: their pairs

AGGREGATE_KEY = "_aggregate"  # as_dict's mark of a summary record (capture names cannot start _)
COUNT_KEYS = ("prompt_tokens", "generated_tokens")
# Knobs a tool without llama.cpp's flags must be left at: field, the value it runs with.
_UNPASSED_DEFAULTS = (("type_k", "f16"), ("type_v", "f16"), ("flash_attn", "auto"),
                      ("n_depth", 0))


@dataclass(frozen=True)
class GenericRecord:
    values: dict[str, Any]  # the JSON object (jsonl) or the matched numbers by name (regex)
    raw: str
    aggregate: bool = False  # the tool's summary, not one repetition
    counts: dict[str, Any] = field(default_factory=dict)  # captured token counts (jsonl)

    def as_dict(self) -> dict[str, Any]:
        data = {**self.counts, **self.values}
        if self.aggregate:
            data[AGGREGATE_KEY] = True
        return data


@dataclass(frozen=True)
class GenericEngine:
    """An ``Engine`` whose argv and output mapping come from YAML."""

    name: str
    template: tuple[str, ...]
    output_format: str
    metrics: dict[str, Metric]
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tool: str = ""  # the binary under the build's bin/ that {binary} names (default: the name)
    captures: dict[str, Metric] = field(default_factory=dict)
    stream: str = "stdout"  # stdout, stderr, both or file
    output_file: str | None = None  # with stream file: the file the tool writes, in its cwd
    prefix: str = ""  # jsonl: the text before each record's JSON ("" : lines starting with {)
    aggregate: Aggregate | None = None  # what marks the tool's summary over repetitions
    per_repetition: bool = True  # the tool also prints each repetition
    ttft_definition: str | None = None
    family: str = ""  # "llama.cpp": llama.cpp's knob rules apply
    devices: dict[str, str] = field(default_factory=dict)  # family or device name -> word
    model_files: tuple[str, ...] = ()  # files next to the model file that the tool reads
    env: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict[str, str]] = field(default_factory=dict)  # field -> value -> word

    @property
    def binary_name(self) -> str:
        return self.tool or self.name

    @property
    def aggregate_only(self) -> bool:
        """The tool prints only its summary, so it cannot give a sustained cell its series."""
        return self.aggregate is not None and not self.per_repetition

    @property
    def wants_prompt_file(self) -> bool:
        """The argv passes ``{prompt_file}``: the harness pushes a prompt of n_prompt tokens."""
        return self.uses("prompt_file")

    def uses(self, placeholder: str) -> bool:
        """The argv template passes this placeholder to the engine."""
        return any("{" + placeholder + "}" in item for item in self.template)

    def cache_problem(self) -> str:
        return (f"{self.name}'s argv has no {{model}}: the harness evicts or warms the model "
                "file it passes, so this engine cannot honour a cache knob")

    def supports(self, cell: Cell) -> str | None:
        if self.family == LLAMA_CPP:
            common = common_problem(cell)
            if common:
                return common[1]
        else:
            reason = context_reason(cell)
            if reason:
                return reason
        for key, values in self.allowed.items():
            if render(getattr(cell, key)) not in values:
                return f"{self.name} supports {key} in {list(values)}, not {getattr(cell, key)!r}"
        if self.aggregate_only:
            reason = sustained_problem(self.name, cell)
            if reason:
                return reason
        reason = self._device_problem(cell) or knobs.offload_problem(cell.compute_device,
                                                                     cell.n_gpu_layers)
        if reason:
            return reason
        if self.family != LLAMA_CPP:
            for key, default in _UNPASSED_DEFAULTS:
                value = getattr(cell, key)
                if value != default and not self.uses(key):
                    return (f"{self.name}'s argv has no {{{key}}}, so {key} {value} cannot be "
                            f"asked of it (it runs with {default})")
        if cell.load_mode and not self.uses("load_mode"):
            return (f"{self.name}'s argv has no {{load_mode}}, so load_mode {cell.load_mode} "
                    "cannot be asked of it")
        if cell.cache and not self.uses("model"):
            return self.cache_problem()
        return None

    def device_word(self, cell: Cell) -> str | None:
        """The tool's backend word for the cell's device: by device name, else by family."""
        if cell.compute_device in self.devices:
            return self.devices[cell.compute_device]
        return self.devices.get(device_family(cell.compute_device) or "")

    def _device_problem(self, cell: Cell) -> str | None:
        if self.devices:
            if self.device_word(cell) is None:
                family = device_family(cell.compute_device) or "unknown"
                return (f"{self.name} has no backend for device {cell.compute_device} (family "
                        f"{family}); its devices map: {', '.join(self.devices)}")
            return None
        if cell.compute_device != knobs.CPU_DEVICE and not self.uses("compute_device"):
            return (f"{self.name} declares no devices map and its argv has no "
                    f"{{compute_device}}, so it runs on the CPU only, not on "
                    f"{cell.compute_device}")
        return None

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None,
        prompt_file: str | None = None,
    ) -> list[str]:
        """The command line; ``prompt_file`` is the device path of the pushed prompt."""
        require_supported(self, cell)
        if self.wants_prompt_file and not prompt_file:
            raise EngineError(f"{self.name}'s argv passes {{prompt_file}}: the device path of a "
                              f"prompt of {cell.n_prompt} tokens is needed to build it")
        values = {key: self._word(key, getattr(cell, key)) for key in CELL_FIELDS}
        flash = flash_attn_setting(cell)[0] if self.family == LLAMA_CPP else cell.flash_attn
        values.update(
            binary=binary_path, binary_dir=posixpath.dirname(binary_path), model=model_path,
            model_dir=posixpath.dirname(model_path), flash_attn=self._word("flash_attn", flash),
            load_mode=self._word("load_mode", cell.resolved_load_mode),
            cpu_mask=affinity_mask(cell, cpu_mask) or "", device=self.device_word(cell) or "",
            output_file=self.output_file or "", prompt_file=prompt_file or "")
        return [item.format_map(values) for item in self.template]

    def _word(self, key: str, value: Any) -> str:
        text = render(value)
        return self.values.get(key, {}).get(text, text)

    def environment(self, binary_path: str, model_path: str) -> dict[str, str]:
        """The environment variables the tool is launched with (paths on the device)."""
        where = {"binary_dir": posixpath.dirname(binary_path),
                 "model_dir": posixpath.dirname(model_path)}
        return {name: value.format_map(where) for name, value in self.env.items()}

    def parse(self, output: EngineOutput | str) -> list[Record]:
        text = as_output(output).stream(self.stream)
        if self.output_format == "jsonl":
            return list(self._parse_jsonl(text))
        return list(self._parse_regex(text))

    def _parse_regex(self, text: str) -> list[GenericRecord]:
        cut = len(text)
        if self.aggregate is not None:
            marker = re.search(self.aggregate.marker, text, re.MULTILINE)
            cut = marker.start() if marker else cut
        records = self._regex_records(text[:cut], aggregate=False)
        return records + self._regex_records(text[cut:], aggregate=True)[:1]

    def _regex_records(self, text: str, aggregate: bool) -> list[GenericRecord]:
        sources = {**{name: m.source for name, m in self.metrics.items() if m.source},
                   **{name: m.source for name, m in self.captures.items()}}
        records = []
        for block in repetition_blocks(text, sources):
            values: dict[str, Any] = {}
            for name, match in block:
                value = number(match.group(1))
                if value is not None:
                    values[name] = value
            if values:
                raw = "\n".join(match.group(0) for _, match in block)
                records.append(GenericRecord(values, raw, aggregate))
        return records

    def _parse_jsonl(self, text: str) -> list[GenericRecord]:
        records = []
        for line in text.splitlines():
            body = _json_text(line, self.prefix)
            if body is None:
                continue
            try:
                data = json.loads(body)
            except json.JSONDecodeError:
                continue  # a truncated or foreign line
            if isinstance(data, dict):
                counts = {key: lookup(data, self.captures[key].source) for key in COUNT_KEYS
                          if key in self.captures and key not in data}
                records.append(GenericRecord(data, line.strip(), self._is_summary(data), counts))
        return records

    def _is_summary(self, data: Mapping[str, Any]) -> bool:
        if self.aggregate is None:
            return False
        value = lookup(data, self.aggregate.key)
        if self.aggregate.equals:
            return bool(value == self.aggregate.equals[0])
        return value is not None and value is not False

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        """One Measurement per repetition record, then at most one for the tool's summary.

        The summary's ``aggregate_n`` is its capture ``n`` when declared and found, else the
        number of repetition records seen, else None; its ``rep`` is 0.
        """
        summaries = [r for r in records if _is_aggregate(r)]
        repetitions = [r for r in records if not _is_aggregate(r)]
        out = [self._measurement(rep, record, None) for rep, record in enumerate(repetitions)]
        for record in summaries[:1]:
            n = self._captured(record).get("n")
            count = round(n) if n is not None else (len(repetitions) or None)
            out.append(self._measurement(0, record, count))
        return out

    def _captured(self, record: Record) -> dict[str, float]:
        data = record.as_dict()
        captured = {}
        for name, capture in self.captures.items():
            value = number(data.get(name) if self.output_format == "regex"
                           else lookup(data, capture.source))
            if value is not None:
                captured[name] = value * capture.scale
        return captured

    def _measurement(self, rep: int, record: Record, aggregate_n: int | None) -> Measurement:
        data = record.as_dict()
        captured = self._captured(record)
        figures = {name: _figure(metric, name, data, captured, self.output_format)
                   for name, metric in self.metrics.items()}
        ttft = figures.get("ttft")
        peak = figures.get("peak_memory")
        return Measurement(
            rep, figures.get("prompt_tps"), figures.get("gen_tps"), ttft,
            aggregate_n=aggregate_n, prompt_tps_sd=figures.get("prompt_tps_sd"),
            gen_tps_sd=figures.get("gen_tps_sd"),
            ttft_definition=self.ttft_definition if ttft is not None else None,
            load_s=figures.get("load"), peak_bytes=round(peak) if peak is not None else None)


Match = tuple[str, "re.Match[str]"]  # (pattern name, its match)


def repetition_blocks(text: str, sources: Mapping[str, str]) -> list[list[Match]]:
    """Every match of every pattern, in text order, cut into one block per repetition.

    A repetition prints its lines in one order, its layout; a match whose pattern comes no later
    in the layout than the previous match's starts the next repetition. So a line one repetition
    lacks leaves that repetition without the figure, instead of shifting every later
    repetition's figure one place (as pairing the n-th match of each pattern would). The layout
    is read from the text itself (``_layout``); matches at one offset keep the declared order.
    """
    names = list(sources)
    found = [(name, match) for _, _, name, match in sorted(
        (match.start(), names.index(name), name, match)
        for name, source in sources.items()
        for match in re.finditer(source, text, re.MULTILINE))]
    layout = _layout(found)
    blocks: list[list[Match]] = []
    last = len(layout)
    for name, match in found:
        if layout[name] <= last:
            blocks.append([])
        blocks[-1].append((name, match))
        last = layout[name]
    return blocks


def _layout(found: Sequence[Match]) -> dict[str, int]:
    """Each pattern's place in a repetition: the order of the first run of matches holding every
    pattern once (runs are cut where a pattern repeats, a sure repetition boundary), else the
    order the patterns first appear in. A repetition that lacks its first line then still
    starts a new block, which cutting at repeats alone would glue to the one before."""
    first: dict[str, int] = {}
    run: list[str] = []
    for name, _ in found:
        first.setdefault(name, len(first))
    for name, _ in found:
        if name in run:
            run = []
        run.append(name)
        if len(run) == len(first):
            return {pattern: place for place, pattern in enumerate(run)}
    return first


def _is_aggregate(record: Record) -> bool:
    if isinstance(record, GenericRecord):
        return record.aggregate
    return bool(record.as_dict().get(AGGREGATE_KEY))


def _figure(metric: Metric, name: str, data: Mapping[str, Any], captured: Mapping[str, float],
            fmt: str) -> float | None:
    if metric.expr is not None:
        value = metric.expr.evaluate(captured)
    else:
        value = number(data.get(name) if fmt == "regex" else lookup(data, metric.source))
    return None if value is None else value * metric.scale


def _json_text(line: str, prefix: str) -> str | None:
    """The JSON part of a line: after ``prefix`` (text before it is the tool's unterminated
    output), or the whole line when it starts with ``{`` and there is no prefix."""
    if prefix:
        at = line.find(prefix)
        return line[at + len(prefix):].strip() if at >= 0 else None
    line = line.strip()
    return line if line.startswith("{") else None


def render(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


