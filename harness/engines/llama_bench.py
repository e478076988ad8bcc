"""The llama-bench adapter: cell -> argv, ``-o jsonl`` output -> records -> measurements.

llama-bench prints one JSON object per test and flushes after each, so a crash half-way leaves
the finished tests on stdout; ``parse_output`` keeps every complete line and drops a truncated
last one. Key sets differ between llama.cpp versions (``use_mmap`` became ``load_mode``, ``-fa``
took 0/1 and now on/off/auto): records keep llama-bench's own key names, unknown keys are kept in
``extra`` and missing ones read as None. Command-line differences are a ``Dialect``, detectable
from ``llama-bench --help``.

How the cell's n_ctx is honoured: llama-bench has no ``-c``; it sizes each test's context to
exactly ``n_prompt + n_gen + n_depth`` tokens (tools/llama-bench/llama-bench.cpp,
``cparams.n_ctx = n_prompt + n_gen + n_depth``). A cell whose workload does not fit its n_ctx is
therefore unsupported, and the way to measure speed at a given fill of the context is n_depth.
It also always sets ``swa_full`` false: a cell asking for a full-size sliding-window cache is
unsupported here.

Where the model runs is always said: ``-dev`` (the cell's device, ``none`` for the CPU only) and
``-ngl`` (its offloaded layers) are passed on every command line. llama-bench's own defaults are
``-ngl -1`` (every layer) on the first device, so a build with Vulkan, OpenCL or Hexagon would
otherwise run a "CPU" cell on the GPU; and ``-ngl 0`` alone still sends large batched ops to a
device that is present. A build too old for ``-dev`` refuses device cells, and runs CPU cells
with ``-ngl 0`` only when it has no GPU backend compiled in. ``backends`` in the JSONL describes
the build; ``devices`` the test's devices (an echo of ``-dev``: where the model really ran is
read from the log, ``harness.run.offload``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    flash_attn_setting,
    require_supported,
)
from harness.errors import EngineError


@dataclass(frozen=True)
class BenchRecord:
    """One llama-bench test (one JSONL line); attribute names are llama-bench's keys."""

    build_commit: str | None = None
    build_number: int | None = None
    cpu_info: str | None = None
    gpu_info: str | None = None  # the build's GPU devices, described (not what the test used)
    backends: str | None = None
    model_filename: str | None = None
    model_type: str | None = None
    model_size: int | None = None
    model_n_params: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    devices: str | None = None  # the test's devices ("auto", "none", "Vulkan0", ...)
    cpu_mask: str | None = None
    cpu_strict: bool | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: Any = None  # int (-1 auto, 0, 1) in newer versions, bool in older ones
    use_mmap: bool | None = None  # older versions
    load_mode: str | None = None  # newer versions ("mmap", "none", ...)
    n_prompt: int | None = None
    n_gen: int | None = None
    n_depth: int | None = None
    test_time: str | None = None
    avg_ns: int | None = None
    stddev_ns: int | None = None
    avg_ts: float | None = None
    stddev_ts: float | None = None
    samples_ns: tuple[int, ...] = ()
    samples_ts: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # keys this harness does not know
    raw: str = ""  # the JSONL line as printed

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _META}
        data["samples_ns"] = list(self.samples_ns)
        data["samples_ts"] = list(self.samples_ts)
        return {**data, **self.extra}

    @property
    def kind(self) -> str:
        """``pp`` (prompt only), ``tg`` (generation only) or ``pg`` (both)."""
        prompt, gen = self.n_prompt or 0, self.n_gen or 0
        return "pg" if prompt and gen else ("pp" if prompt else "tg")


_META = ("extra", "raw")
_KNOWN = tuple(f.name for f in fields(BenchRecord) if f.name not in _META)


def record_from_dict(data: dict[str, Any], raw: str = "") -> BenchRecord:
    known = {key: data[key] for key in _KNOWN if key in data}
    for key in ("samples_ns", "samples_ts"):
        if key in known:
            known[key] = tuple(known[key] or ())
    extra = {key: value for key, value in data.items() if key not in _KNOWN}
    return BenchRecord(**known, extra=extra, raw=raw)


def parse_output(text: str) -> list[BenchRecord]:
    """One record per complete JSONL line of ``llama-bench -o jsonl``.

    Lines that are not JSON objects (stray log text) are skipped. A last line that does not parse
    is a run cut short and is dropped; a broken line *before* a good one means the output itself
    is damaged, which is an error rather than something to hide.
    """
    lines = [line.strip() for line in text.splitlines()]
    candidates = [(i, line) for i, line in enumerate(lines) if line.startswith("{")]
    records = []
    for position, (number, line) in enumerate(candidates):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            if position == len(candidates) - 1:
                break  # truncated by a crash or a timeout: keep what finished
            raise EngineError(
                f"llama-bench output line {number + 1} is not JSON: {error}"
            ) from None
        if isinstance(data, dict):
            records.append(record_from_dict(data, raw=line))
    return records


def measure_records(records: Sequence[BenchRecord]) -> list[Measurement]:
    """Pair the prompt test and the generation test repetition by repetition.

    TTFT is the prompt test's time for its n_prompt tokens (samples_ns), per repetition.
    """
    prompt = next((r for r in records if r.kind == "pp"), None)
    gen = next((r for r in records if r.kind == "tg"), None)
    reps = max(len(prompt.samples_ts) if prompt else 0, len(gen.samples_ts) if gen else 0)
    out = []
    for rep in range(reps):
        out.append(
            Measurement(
                rep=rep,
                prompt_tps=_at(prompt.samples_ts, rep) if prompt else None,
                gen_tps=_at(gen.samples_ts, rep) if gen else None,
                ttft_s=_seconds(_at(prompt.samples_ns, rep)) if prompt else None,
            )
        )
    return out


def _at(values: Sequence[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def _seconds(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e9


@dataclass(frozen=True)
class Dialect:
    """Command-line differences between llama-bench versions."""

    load_mode: bool = True  # -lm mmap|none (newer) instead of -mmp 1|0
    flash_attn_words: bool = True  # -fa on|off|auto (newer) instead of -fa 1|0
    depth: bool = True  # -d / --n-depth exists
    cpu_mask: bool = True  # -C / --cpu-strict exist
    device: bool = True  # -dev / --device and --list-devices exist


def dialect_from_help(text: str) -> Dialect:
    """Read the dialect from ``llama-bench --help`` output."""
    return Dialect(
        load_mode="--load-mode" in text,
        flash_attn_words="on|off|auto" in text,
        depth="--n-depth" in text,
        cpu_mask="--cpu-mask" in text,
        device="--device" in text,
    )


# registry knobs whose llama-bench flag depends on the build's dialect (argv spells them)
_SPELT = ("type_k", "type_v", "threads", "flash_attn", "load_mode", "compute_device",
          "n_gpu_layers")


@dataclass(frozen=True)
class LlamaBench:
    """The llama-bench adapter (``Engine`` protocol)."""

    dialect: Dialect = Dialect()
    name: str = "llama-bench"
    # the GPU/NPU backends the build has compiled in (its manifest's), () for a CPU build
    gpu_backends: tuple[str, ...] = ()

    def supports(self, cell: Cell) -> str | None:
        common = common_problem(cell)
        if common:
            return common[1]
        if cell.n_depth and not self.dialect.depth:
            return "this llama-bench has no -d (n_depth); use a newer build or n_depth 0"
        if cell.affinity != "all" and not self.dialect.cpu_mask:
            return "this llama-bench cannot pin threads (no --cpu-mask)"
        if cell.swa_full:
            return ("llama-bench always gives sliding-window layers a windowed cache (swa_full "
                    "false); measure swa_full true with llama-cpp-python")
        if cell.load_mode and not self.dialect.load_mode:
            return (f"this llama-bench has no --load-mode (only -mmp 0|1), so load_mode "
                    f"{cell.load_mode} cannot be asked; use mmap true/false or a newer build")
        offload = knobs.offload_problem(cell.compute_device, cell.n_gpu_layers)
        if offload:
            return offload
        if self.dialect.device:
            return None
        if cell.compute_device != knobs.CPU_DEVICE:
            return (f"this llama-bench has no -dev/--device (an older build), so device "
                    f"{cell.compute_device} cannot be asked; use a newer build")
        if self.gpu_backends:
            return (f"this llama-bench has no -dev/--device (an older build) and has "
                    f"{', '.join(self.gpu_backends)} compiled in: -ngl 0 alone still sends "
                    "large batched ops to the device (docs/gpu.md), so the CPU cannot be asked; "
                    "use a newer build or one without a GPU backend")
        return None

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        flash, _ = flash_attn_setting(cell)
        argv = [binary_path, "-m", model_path, "-p", str(cell.n_prompt), "-n", str(cell.n_gen)]
        if self.dialect.depth:
            argv += ["-d", str(cell.n_depth)]
        # the knobs llama-bench takes as they are (-b, -ub, ...), then those it spells its way
        argv += knobs.engine_args(cell.knob_values(), self.name, skip=_SPELT)
        argv += [knobs.flag("threads"), str(cell.threads)]
        argv += [knobs.flag("type_k"), cell.type_k, knobs.flag("type_v"), cell.type_v]
        if self.dialect.flash_attn_words:
            argv += [knobs.flag("flash_attn"), str(flash)]
        elif flash in ("on", "off"):
            argv += [knobs.flag("flash_attn"), "1" if flash == "on" else "0"]
        if self.dialect.load_mode:  # the build's own flag and names (llama.cpp --load-mode)
            argv += [knobs.flag("load_mode"), cell.resolved_load_mode]
        else:
            argv += ["-mmp", "1" if cell.mmap else "0"]
        if self.dialect.device:  # never llama-bench's own choice (-ngl -1 on the first device)
            argv += [knobs.flag("compute_device"), cell.compute_device]
        argv += [knobs.flag("n_gpu_layers"), str(cell.n_gpu_layers)]
        mask = affinity_mask(cell, cpu_mask)
        if mask:
            argv += ["-C", mask, "--cpu-strict", "1"]
        # -v lets llama.cpp log its own cache and buffer sizes on stderr (harness.engines.llamalog)
        argv += ["-r", str(cell.repetitions), "-o", "jsonl", "-v"]
        return argv

    def parse(self, output: EngineOutput | str) -> list[Record]:
        return list(parse_output(as_output(output).stdout))

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        bench = [r if isinstance(r, BenchRecord) else record_from_dict(r.as_dict(), r.raw)
                 for r in records]
        return measure_records(bench)
