"""The LiteRT-LM adapter: ``litert_lm_main`` / ``litert_lm_advanced_main --benchmark``.

What the tool prints (google-ai-edge/LiteRT-LM, read at 99811c2fa3101df7ecbd8e94d59f1e1ae0a3f42e,
2026-07-23, through the zkh2016/LiteRT-LM mirror of its history, plus the older commits named
below): in benchmark mode ``runtime/engine/litert_lm_lib.cc`` (``LogBenchmarkInfo``) logs the
session's ``BenchmarkInfo`` with ``ABSL_LOG(INFO)``, i.e. on stderr, as ONE multi-line message:
only its first line carries absl's prefix (``I0723 17:45:58.123456  1234 litert_lm_lib.cc:430]
BenchmarkInfo:``), the rest are bare. ``runtime/engine/io_types.cc`` (``operator<<(ostream&,
const BenchmarkInfo&)``, floats ``std::fixed`` with 2 decimals, durations in absl's
``FormatDuration`` form such as ``1.234567s`` or ``523.1ms``)::

    BenchmarkInfo:
      Init Phases (N):
        - <phase name>: <ms> ms            (std::map order; "Init Total" since a6120c9f)
        Total init time: <ms> ms           (only before a6120c9f, 2026-03-06)
    --------------------------------------------------
      Time to first token: <s> s          (since bd4b7227, 2025-09-12)
    --------------------------------------------------
      Prefill Turns (Total N turns):      ("(Total: N):" before bd4b7227)
        Prefill Turn <i>: Processed <n> tokens in <duration> duration.
          Prefill Speed: <tps> tokens/sec.
    --------------------------------------------------
      Decode Turns (Total N turns):
        Decode Turn <i>: Processed <n> tokens in <duration> duration.
          Decode Speed: <tps> tokens/sec.
    --------------------------------------------------
      TextToTokenIds Turns ..., Mark Durations ..., Profile Summary ...   (newer builds)

Then, with ``--report_peak_memory_footprint``, separate log lines ``Peak system ram usage:
<x>MB.`` and ``Peak private footprint: <x>MB.`` (default float formatting). Their "MB" is
tflite's ``MemoryUsageMonitor::GetPeakMemUsageInMB``: peak max-RSS in KiB / 1024, i.e. MiB.
With ``--num_iterations=N`` (``litert_lm_advanced_main`` since b478e760, 2026-01-08) the engine is
created once and each iteration runs a fresh conversation and logs its own block and peak
lines: one block per iteration, each a repetition (LiteRT-LM prints no median or mean over
iterations). Within a block, turn i of the prefill list pairs with turn i of the decode list;
every (block, turn) is one record and one Measurement.

Time to first token: ``BenchmarkInfo::GetTimeToFirstToken`` is the first prefill turn's duration
plus the first decode turn's duration divided by its token count (one mean decode step), so
``ttft_definition`` is ``prefill+first_decode``. The printed line has only 10 ms resolution, so
the adapter applies the same formula to the durations printed with each turn (nanosecond
resolution) and falls back to the printed line when a duration cannot be read.

``load_s`` is the engine's ``Init Total`` phase (engine creation: model assets to tokenizer) where
printed, else the older ``Total init time`` line (the sum of the phases printed, session or
conversation creation included), else the sum of the printed phases. ``peak_bytes`` is
``Peak system ram usage`` (MiB) in bytes. ``prompt_tokens`` and ``generated_tokens`` are the
turns' ``Processed <n> tokens``; ``n_threads`` is the ``number_of_threads`` of the CPU config the
tool logs with its ``executor_settings`` (CPU backend only).

Devices: a cell names LiteRT-LM's own backend, ``device: gpu`` or ``device: npu`` (none is the
CPU), never a llama.cpp device name: ``--backend=gpu`` is LiteRT's GPU delegate whatever GPU API
it uses, so storing it as ``Vulkan0`` would file it beside llama.cpp's Vulkan trials.

The command line (flags from ``runtime/engine/shared_flags.cc`` and
``runtime/engine/litert_lm_advanced_main.cc``)::

    litert_lm_advanced_main --model_path=M.litertlm --backend=cpu --num_cpu_threads=T
        --benchmark --benchmark_prefill_tokens=P --benchmark_decode_tokens=G --async=false
        --report_peak_memory_footprint [--num_iterations=N when N > 1]

``--async=false``: builds before the conversation API (June 2025) abort on an asynchronous run
with a set token count. Which binary: until 2fbb5ec5 (2025-10-20) ``litert_lm_main`` had these
flags; from then on ``litert_lm_main`` is a plain demo without ``--benchmark`` (absl rejects the
unknown flag) and the benchmark flags live in ``litert_lm_advanced_main``. ``LITERT_LM``
(``litert-lm``) runs ``litert_lm_main`` for older builds; ``LITERT_LM_ADVANCED``
(``litert-lm-advanced``) runs ``litert_lm_advanced_main``, with ``--num_iterations``.

Not mapped: the tool has no flags for KV cache types, flash attention, depth, a sliding-window
cache, CPU pinning or load mode (it memory-maps the .litertlm file); n_ctx is not passed (the
advanced binary sizes ``max_num_tokens`` to prompt + generated tokens in benchmark mode, a
static model keeps its own), and n_batch/n_ubatch are not passed (the prompt is prefilled in
one signature of n_prompt tokens). The tool keeps weight and GPU program caches beside the model
file, which a cold/warm cache knob would not cover.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from harness import knobs
from harness.cell import Cell
from harness.engines.base import (
    TTFT_FIRST_DECODE,
    EngineOutput,
    Measurement,
    Record,
    as_output,
    context_reason,
    device_family,
    require_supported,
)
from harness.errors import EngineError
from harness.units import MIB

BACKENDS = ("cpu", "gpu", "npu")

# absl's prefix on the first line of each log message: severity + MMDD, time, thread id, file:line]
_LOG_PREFIX = re.compile(r"^[IWEFV]\d{4}\s+\S+\s+\d+\s+[^\s\]]+:\d+\]\s?")
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_BLOCK_START = "BenchmarkInfo:"
_INIT_HEADER = re.compile(r"^Init Phases \(\d+\):$")
_PHASE = re.compile(rf"^- (.+): {_NUM} ms$")
_TOTAL_INIT = re.compile(rf"^Total init time: {_NUM} ms$")
_TTFT = re.compile(rf"^Time to first token: {_NUM} s$")
_TURNS_HEADER = re.compile(r"^(Prefill|Decode) Turns \(Total:? \d+(?: turns)?\):$")
_OTHER_HEADER = re.compile(r"^(TextToTokenIds Turns|Mark Durations|Profile Summary)\b")
_TURN = re.compile(r"^(Prefill|Decode) Turn (\d+): Processed (\d+) tokens in (\S+) duration\.$")
_SPEED = re.compile(rf"^(Prefill|Decode) Speed: {_NUM} tokens/sec\.$")
_PEAK = re.compile(rf"^Peak system ram usage: {_NUM} ?MB\.?$")
_PRIVATE = re.compile(rf"^Peak private footprint: {_NUM} ?MB\.?$")
_THREADS = re.compile(r"^number_of_threads: (\d+)$", re.MULTILINE)
_INIT_TOTAL_PHASE = "Init Total"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(h|ms|us|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class LiteRtLmRecord:
    """One turn of one ``BenchmarkInfo`` block (one iteration); names follow the tool's lines."""

    iteration: int  # 0-based: the block's place among the blocks printed
    turn: int  # 0-based turn within the block
    prompt_tokens: int  # "Prefill Turn i: Processed <n> tokens"
    prefill_duration_s: float | None
    prefill_tokens_per_sec: float | None
    generated_tokens: int  # "Decode Turn i: Processed <n> tokens"
    decode_duration_s: float | None
    decode_tokens_per_sec: float | None
    time_to_first_token_s: float | None = None  # the block's printed line (turn 0 only)
    init_phases_ms: dict[str, float] = field(default_factory=dict)
    total_init_time_ms: float | None = None  # the older builds' "Total init time" line
    peak_system_ram_mb: float | None = None  # MiB
    peak_private_footprint_mb: float | None = None
    n_threads: int | None = None  # number_of_threads of the logged CPU config
    raw: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "raw"}
        data["init_phases_ms"] = dict(self.init_phases_ms)
        return data

    @property
    def ttft_s(self) -> float | None:
        """The tool's own formula (first prefill + one mean decode step) on this turn's
        durations; the printed line where a duration could not be read."""
        if (self.prefill_duration_s is not None and self.decode_duration_s is not None
                and self.generated_tokens > 0 and self.prompt_tokens > 0):
            return self.prefill_duration_s + self.decode_duration_s / self.generated_tokens
        if self.turn == 0 and self.time_to_first_token_s and self.time_to_first_token_s > 0:
            return self.time_to_first_token_s
        return None

    @property
    def load_s(self) -> float | None:
        """Init Total where printed, else the older Total init time, else the phases' sum."""
        if _INIT_TOTAL_PHASE in self.init_phases_ms:
            return self.init_phases_ms[_INIT_TOTAL_PHASE] / 1000.0
        if self.total_init_time_ms is not None:
            return self.total_init_time_ms / 1000.0
        if self.init_phases_ms:
            return sum(self.init_phases_ms.values()) / 1000.0
        return None

    @property
    def peak_bytes(self) -> int | None:
        mib = self.peak_system_ram_mb
        return round(mib * MIB) if mib is not None and mib > 0 else None


_KNOWN = tuple(f.name for f in fields(LiteRtLmRecord) if f.name != "raw")


def record_from_dict(data: dict[str, Any], raw: str = "") -> LiteRtLmRecord:
    """A record back from its stored ``as_dict`` form."""
    known = {key: data[key] for key in _KNOWN if key in data}
    known["init_phases_ms"] = dict(known.get("init_phases_ms") or {})
    return LiteRtLmRecord(**known, raw=raw)


def strip_prefix(line: str) -> str:
    """The line without absl's log prefix, if it has one, and without surrounding blanks."""
    return _LOG_PREFIX.sub("", line.rstrip("\r\n")).strip()


def duration_seconds(text: str) -> float | None:
    """absl's ``FormatDuration`` text (``1h2m3.5s``, ``523.1ms``, ``0``) in seconds."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("-")
    if body == "0":
        return 0.0
    total, position = 0.0, 0
    for part in _DURATION_PART.finditer(body):
        if part.start() != position:
            return None
        total += float(part.group(1)) * _UNIT_SECONDS[part.group(2)]
        position = part.end()
    if position == 0 or position != len(body):
        return None  # "inf" or a cut-off number
    return sign * total


def split_blocks(text: str) -> list[list[str]]:
    """The lines of each BenchmarkInfo block (as printed), each up to the next block's start:
    a block's peak memory lines, logged after it, stay with it."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if strip_prefix(line) == _BLOCK_START:
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


@dataclass
class _Turn:
    tokens: int
    seconds: float | None
    tps: float | None = None  # None until its speed line is read


@dataclass
class _Block:
    phases: dict[str, float] = field(default_factory=dict)
    total_init_ms: float | None = None
    ttft_s: float | None = None
    turns: dict[str, dict[int, _Turn]] = field(
        default_factory=lambda: {"Prefill": {}, "Decode": {}})
    last: dict[str, int] = field(default_factory=dict)  # kind -> the turn its speed belongs to
    peak_mb: float | None = None
    private_mb: float | None = None


def _read_block(lines: Sequence[str]) -> _Block:
    block = _Block()
    section = ""
    for line in lines:
        text = strip_prefix(line)
        if _INIT_HEADER.match(text):
            section = "init"
        elif match := _TURNS_HEADER.match(text):
            section = match.group(1)
        elif _OTHER_HEADER.match(text) or text == _BLOCK_START:
            section = "other"
        elif section == "init" and (match := _PHASE.match(text)):
            block.phases[match.group(1)] = float(match.group(2))
        elif match := _TOTAL_INIT.match(text):
            block.total_init_ms = float(match.group(1))
        elif match := _TTFT.match(text):
            block.ttft_s = float(match.group(1))
        elif match := _TURN.match(text):
            kind, number = match.group(1), int(match.group(2))
            block.turns[kind][number] = _Turn(int(match.group(3)),
                                              duration_seconds(match.group(4)))
            block.last[kind] = number
        elif (match := _SPEED.match(text)) and match.group(1) in block.last:
            kind = match.group(1)
            block.turns[kind][block.last[kind]].tps = float(match.group(2))
        elif (match := _PEAK.match(text)) and block.peak_mb is None:
            block.peak_mb = float(match.group(1))
        elif (match := _PRIVATE.match(text)) and block.private_mb is None:
            block.private_mb = float(match.group(1))
    return block


def _positive(value: float | None) -> float | None:
    """The tool prints 0.00 tokens/sec for a turn it could not time: not a speed."""
    return value if value is not None and value > 0 else None


def _block_records(lines: Sequence[str], iteration: int,
                   n_threads: int | None) -> list[LiteRtLmRecord]:
    """One record per turn that has both its prefill and its decode lines complete; the first
    incomplete turn ends the block (a cut-off tail)."""
    block = _read_block(lines)
    raw = "\n".join(lines)
    records = []
    for number in sorted(block.turns["Prefill"]):
        prefill = block.turns["Prefill"][number]
        decode = block.turns["Decode"].get(number)
        if prefill.tps is None or decode is None or decode.tps is None:
            break
        records.append(LiteRtLmRecord(
            iteration=iteration, turn=number - 1,
            prompt_tokens=prefill.tokens, prefill_duration_s=prefill.seconds,
            prefill_tokens_per_sec=prefill.tps,
            generated_tokens=decode.tokens, decode_duration_s=decode.seconds,
            decode_tokens_per_sec=decode.tps,
            time_to_first_token_s=block.ttft_s if number == 1 else None,
            init_phases_ms=dict(block.phases), total_init_time_ms=block.total_init_ms,
            peak_system_ram_mb=block.peak_mb, peak_private_footprint_mb=block.private_mb,
            n_threads=n_threads, raw=raw,
        ))
    return records


def parse_output(text: str) -> list[LiteRtLmRecord]:
    """Every complete turn of every BenchmarkInfo block in the tool's log text (stderr)."""
    threads = _THREADS.search("\n".join(strip_prefix(line) for line in text.splitlines()))
    n_threads = int(threads.group(1)) if threads else None
    records: list[LiteRtLmRecord] = []
    for iteration, lines in enumerate(split_blocks(text)):
        records += _block_records(lines, iteration, n_threads)
    return records


def measure_records(records: Sequence[LiteRtLmRecord]) -> list[Measurement]:
    """One Measurement per turn of each iteration, in the order printed."""
    out = []
    for rep, record in enumerate(records):
        ttft = record.ttft_s
        out.append(Measurement(
            rep=rep,
            prompt_tps=_positive(record.prefill_tokens_per_sec),
            gen_tps=_positive(record.decode_tokens_per_sec),
            ttft_s=ttft,
            ttft_definition=TTFT_FIRST_DECODE if ttft is not None else None,
            load_s=record.load_s,
            peak_bytes=record.peak_bytes,
        ))
    return out


def backend_for(engine: str, compute_device: str) -> tuple[str | None, str | None]:
    """(``--backend``'s word, None) for a device knob value, or (None, why it cannot run).

    LiteRT-LM's devices are its own words: none (the CPU), ``gpu`` (LiteRT's GPU delegate) and
    ``npu``. A llama.cpp device name (Vulkan0, GPUOpenCL, HTP0) is refused, not mapped: the
    trial would be stored under llama.cpp's device while it ran on another backend.
    """
    if compute_device == knobs.CPU_DEVICE:
        return "cpu", None
    if compute_device in BACKENDS[1:]:
        return compute_device, None
    family = device_family(compute_device)
    if family in BACKENDS[1:]:
        return None, (f"{engine}'s --backend={family} is LiteRT's own {family} delegate, not "
                      f"llama.cpp's {compute_device}; name the device {family} (LiteRT-LM's "
                      f"word) so these trials are not stored under llama.cpp's device")
    return None, (f"{engine} has no backend for device {compute_device}; its devices are none "
                  f"(the CPU), {' and '.join(BACKENDS[1:])}")


@dataclass(frozen=True)
class LiteRtLm:
    """The LiteRT-LM benchmark adapter (``Engine`` protocol).

    ``iterations``: the binary has ``--num_iterations`` (``litert_lm_advanced_main`` since
    2026-01), so a launch can run a sustained cell's N repetitions.
    """

    name: str = "litert-lm"
    binary_name: str = "litert_lm_main"
    iterations: bool = False
    aggregate_only: bool = False  # one block per iteration: a per-repetition series

    def supports(self, cell: Cell) -> str | None:
        reason = context_reason(cell)
        if reason:
            return reason
        family, reason = backend_for(self.name, cell.compute_device)
        if reason:
            return reason
        offload = knobs.offload_problem(cell.compute_device, cell.n_gpu_layers)
        if offload:
            return offload
        if family != "cpu" and cell.n_gpu_layers != knobs.ALL_LAYERS:
            return (f"{self.name} runs the whole model on its {family} backend, so n_gpu_layers "
                    f"{knobs.gpu_layers_text(cell.n_gpu_layers)} (a partial offload) cannot be "
                    "asked of it; use n_gpu_layers all")
        return self._knob_problem(cell) or self._workload_problem(cell)

    def _knob_problem(self, cell: Cell) -> str | None:
        if cell.type_k != "f16" or cell.type_v != "f16":
            return (f"{self.name} has no KV cache type flag (the cache type is the model's), "
                    f"so type_k {cell.type_k} / type_v {cell.type_v} cannot be asked of it; "
                    "use f16")
        if cell.flash_attn != "auto":
            return (f"{self.name} has no flash attention flag, so flash_attn {cell.flash_attn} "
                    "cannot be asked of it (it runs with auto)")
        if cell.n_depth:
            return (f"{self.name} has no depth flag (each benchmark starts from an empty "
                    f"cache), so n_depth {cell.n_depth} cannot be asked of it (it runs with 0)")
        if cell.swa_full:
            return (f"{self.name} has no sliding-window cache flag, so swa_full true cannot be "
                    "asked of it")
        if cell.affinity != "all":
            return (f"{self.name} has no CPU mask flag, so affinity {cell.affinity} cannot be "
                    "asked of it (it runs with all)")
        if cell.load_mode or not cell.mmap:
            return (f"{self.name} memory-maps the .litertlm file and has no load mode flag, so "
                    f"load_mode {cell.resolved_load_mode} cannot be asked of it (it runs with "
                    "mmap)")
        if cell.cache:
            return (f"{self.name} keeps weight and program caches beside the model file, which "
                    f"the harness does not evict or warm, so cache {cell.cache} cannot be "
                    "honoured")
        return None

    def _workload_problem(self, cell: Cell) -> str | None:
        if cell.n_prompt <= 0 or cell.n_gen <= 0:
            return (f"{self.name} replaces its prompt and stop rule only for token counts above "
                    f"0, so n_prompt {cell.n_prompt} / n_gen {cell.n_gen} cannot be benchmarked")
        if cell.sustained_s and not self.iterations:
            return (f"{self.binary_name} has no --num_iterations, so a sustained cell (a "
                    "per-repetition series in one launch) cannot be measured with it; use "
                    "litert_lm_advanced_main")
        return None

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        if cpu_mask:
            raise EngineError(f"{self.name} cannot pin threads (no CPU mask flag)")
        backend = backend_for(self.name, cell.compute_device)[0] or "cpu"
        argv = [binary_path, f"--model_path={model_path}", f"--backend={backend}"]
        if backend == "cpu":  # the flag sets the CPU backend's threads only
            argv.append(f"--num_cpu_threads={cell.threads}")
        argv += ["--benchmark", f"--benchmark_prefill_tokens={cell.n_prompt}",
                 f"--benchmark_decode_tokens={cell.n_gen}", "--async=false",
                 "--report_peak_memory_footprint"]
        if cell.repetitions > 1:
            if not self.iterations:
                raise EngineError(f"{self.binary_name} has no --num_iterations: run "
                                  f"{cell.repetitions} repetitions as separate launches")
            argv.append(f"--num_iterations={cell.repetitions}")
        return argv

    def parse(self, output: EngineOutput | str) -> list[Record]:
        out = as_output(output)
        text = out.stderr if isinstance(output, EngineOutput) else out.stdout
        return list(parse_output(text))

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        own = [r if isinstance(r, LiteRtLmRecord) else record_from_dict(r.as_dict(), r.raw)
               for r in records]
        return measure_records(own)


LITERT_LM = LiteRtLm()
LITERT_LM_ADVANCED = LiteRtLm(name="litert-lm-advanced", binary_name="litert_lm_advanced_main",
                              iterations=True)
