"""The engine adapter protocol and what adapters share.

An adapter turns a cell into a command line, says up front whether it can run the cell (so the
planner records ``unsupported`` with a reason instead of a crash), and turns the engine's output
into per-repetition measurements while keeping the engine's raw records for the store. It never
runs anything itself: the executor launches the argv on a device and hands back stdout, so the
same adapter serves this host, a phone over adb and the virtual phone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness import knobs
from harness.cell import Cell
from harness.errors import EngineError

# KV cache types that need no flash attention for V in llama.cpp (the unquantised ones).
FLOAT_KV = ("f32", "f16", "bf16")
FA_NEEDED = "a quantised V cache ({type_v}) needs flash attention in llama.cpp; flash_attn is off"


class Record(Protocol):
    """One engine output record (a JSONL line, a regex match group set, ...)."""

    @property
    def raw(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Measurement:
    """The figures of one repetition, in the units the store uses.

    An engine that prints only a summary (MNN's ``mean ± sd``, a median block) gives one
    Measurement with ``aggregate_n`` set: its figures are the engine's own mean (or median) over
    that many repetitions, never one repetition's.
    """

    rep: int  # 0-based repetition index
    prompt_tps: float | None  # prompt processing, tokens per second
    gen_tps: float | None  # generation, tokens per second
    ttft_s: float | None  # time to first token (``ttft_definition`` says what it counts)
    aggregate_n: int | None = None  # None: one repetition; n: the engine's summary over n
    prompt_tps_sd: float | None = None  # the engine's own spread over those n (aggregates)
    gen_tps_sd: float | None = None
    ttft_definition: str | None = None  # None: TTFT_PROMPT; else one of TTFT_DEFINITIONS
    load_s: float | None = None  # the engine's own load/init time, as it reports it
    peak_bytes: int | None = None  # the engine's own peak memory figure, as it reports it


# What a time to first token counts. llama.cpp's (and the store's default): the time to process
# the n_prompt prompt tokens. Some tools count more: LiteRT-LM stops its clock after the first
# decode step (the first generated token is out); an end-to-end one counts from the request.
TTFT_PROMPT = "prefill"
TTFT_FIRST_DECODE = "prefill+first_decode"
TTFT_END_TO_END = "request_to_first_token"
TTFT_DEFINITIONS = (TTFT_PROMPT, TTFT_FIRST_DECODE, TTFT_END_TO_END)

STREAMS = ("stdout", "stderr", "both", "file")  # EngineOutput.stream
PROMPT_WORD = "the"  # one token per repetition in the vocabularies we know: see prompt_text


def prompt_text(words: int) -> str:
    """A prompt of ``words`` tokens for tools that take text, not a token count.

    A common short word repeated with spaces is one token per repetition in SentencePiece,
    tiktoken and byte-level BPE vocabularies (Llama, Gemma, Qwen), none of which merge across
    spaces; the tool may add a BOS. It is an approximation: where the tool reports its count,
    the harness checks it against the cell (``prompt_tokens``: engine_mismatch if it differs).
    """
    return " ".join([PROMPT_WORD] * words)


@dataclass(frozen=True)
class EngineOutput:
    """What one launch left to read: its two streams and, for a tool that writes its results
    to a file on the phone (``Engine.output_file``), that file's text."""

    stdout: str
    stderr: str = ""
    file: str | None = None  # None: the engine names no file, or the file was not there

    def stream(self, which: str) -> str:
        """``stdout``, ``stderr``, ``both`` (stdout, then stderr) or ``file``."""
        if which == "stdout":
            return self.stdout
        if which == "stderr":
            return self.stderr
        if which == "both":
            return "\n".join(part for part in (self.stdout, self.stderr) if part)
        if which == "file":
            return self.file or ""
        raise EngineError(f"unknown output stream {which!r}; use {', '.join(STREAMS)}")

    def tail(self, lines: int = 8) -> str:
        """The last lines of everything read, for a trial whose output could not be parsed."""
        parts = []
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr),
                           ("file", self.file or "")):
            kept = text.strip().splitlines()[-lines:]
            if kept:
                parts.append(f"[{name}]\n" + "\n".join(kept))
        return "\n".join(parts)


def as_output(output: EngineOutput | str) -> EngineOutput:
    """Adapters that read stdout alone also take its text (tests, the sustained calibration)."""
    return output if isinstance(output, EngineOutput) else EngineOutput(output)


class Engine(Protocol):
    """What every adapter provides; see docs/engines.md for how to add one."""

    @property
    def name(self) -> str:
        """The engine's name as matrices and results spell it."""
        ...

    def supports(self, cell: Cell) -> str | None:
        """None when the cell can run, else the reason it cannot (recorded as ``unsupported``)."""
        ...

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        """The command line, as paths on the device; ``cpu_mask`` resolves affinity "big"."""
        ...

    def parse(self, output: EngineOutput) -> Sequence[Record]:
        """Every complete record in the output; a truncated tail is dropped, not an error."""
        ...

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        """Per-repetition figures from the parsed records."""
        ...


# Optional members, read with getattr where an adapter may lack them:
#   binary_name: str   the file under the build's bin/ that the engine runs (default llama-bench)
#   output_file: str | None   a file, relative to the trial's folder (the launch's working
#       directory), that the tool writes its results to; read after the launch into
#       EngineOutput.file
#   aggregate_only: bool   the tool prints summaries only (no per-repetition series), so it
#       cannot run a sustained cell


def output_file(engine: Engine) -> str | None:
    return getattr(engine, "output_file", None)


# Why a cell cannot run, as the planner and the store spell it (the reason text says more).
ENGINE_UNSUPPORTED = "engine_unsupported"
NEEDS_FLASH_ATTN = "v_cache_needs_flash_attn"
EXCEEDS_CTX = "workload_exceeds_ctx"


def common_problem(cell: Cell) -> tuple[str, str] | None:
    """The rules every llama.cpp-based engine shares: (code, reason), or None.

    A quantised V cache needs flash attention; the workload must fit the context. Adapters call
    this first in ``supports``, so the planner and the engines give one answer.
    """
    _, reason = flash_attn_setting(cell)
    if reason:
        return NEEDS_FLASH_ATTN, reason
    reason = context_reason(cell)
    if reason:
        return EXCEEDS_CTX, reason
    return None


def support_problem(engine: Engine, cell: Cell) -> tuple[str, str] | None:
    """``engine.supports`` with a reason code: the planner's one question to an engine."""
    reason = engine.supports(cell)
    if reason is None:
        return None
    common = common_problem(cell)
    if common is not None and common[1] == reason:
        return common
    return ENGINE_UNSUPPORTED, reason


def require_supported(engine: Engine, cell: Cell) -> None:
    """Raise the engine's reason when it cannot run the cell (argv must not build such a cell)."""
    reason = engine.supports(cell)
    if reason:
        raise EngineError(f"cell {cell.label()}: {reason}")


def flash_attn_setting(cell: Cell) -> tuple[str | None, str | None]:
    """(the flash attention value to run with, or None; the reason the cell cannot run, or None).

    A quantised V cache only works with flash attention in llama.cpp: "auto" is switched on,
    "off" makes the cell unsupported.
    """
    quantised_v = cell.type_v not in FLOAT_KV
    if cell.flash_attn == "off" and quantised_v:
        return None, FA_NEEDED.format(type_v=cell.type_v)
    if cell.flash_attn == "auto" and quantised_v:
        return "on", None
    return cell.flash_attn, None


def context_reason(cell: Cell) -> str | None:
    """The workload must fit the cell's context: prompt + generated + depth tokens <= n_ctx."""
    needed = cell.n_prompt + cell.n_gen + cell.n_depth
    if needed > cell.n_ctx:
        return (f"the workload needs {needed} tokens of context (depth {cell.n_depth} + prompt "
                f"{cell.n_prompt} + gen {cell.n_gen}) but n_ctx is {cell.n_ctx}")
    return None


def affinity_mask(cell: Cell, cpu_mask: str | None) -> str | None:
    """The hex CPU mask to pin to, or None for no pinning ("all")."""
    if cpu_mask:
        return cpu_mask
    if cell.affinity == "all":
        return None
    if cell.affinity.lower().startswith("0x"):
        return cell.affinity
    raise EngineError(
        f"affinity {cell.affinity!r} must be resolved to a CPU mask from the device's cores "
        "before building the command line"
    )


# Device families of the matrix's ``device`` knob (llama.cpp's device names: Vulkan0, OpenCL0,
# CUDA0, MTL0, HTP0 ...; "none" is the CPU), for tools whose backend flag names a family.
_GPU_PREFIXES = ("vulkan", "opencl", "cuda", "mtl", "metal", "gpu", "rocm", "sycl")
_NPU_PREFIXES = ("htp", "qnn", "npu", "hexagon", "apu", "neuron", "tpu", "dsp")
DEVICE_FAMILIES = ("cpu", "gpu", "npu")  # what device_family answers


def device_family(compute_device: str) -> str | None:
    """``cpu``, ``gpu`` or ``npu`` for a device knob value; None when the name says neither."""
    name = compute_device.lower()
    if knobs.is_cpu(name):
        return "cpu"
    if name.startswith(_GPU_PREFIXES):
        return "gpu"
    if name.startswith(_NPU_PREFIXES):
        return "npu"
    return None


def sustained_problem(engine_name: str, cell: Cell) -> str | None:
    """A tool that prints only summaries cannot give a sustained cell its series."""
    if cell.sustained_s:
        return (f"{engine_name} prints only its summary over repetitions, not each one, so a "
                "sustained cell (a per-repetition series) cannot be measured with it")
    return None
