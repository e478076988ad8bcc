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
    """The figures of one repetition, in the units the store uses."""

    rep: int  # 0-based repetition index
    prompt_tps: float | None  # prompt processing, tokens per second
    gen_tps: float | None  # generation, tokens per second
    ttft_s: float | None  # time to first token: time to process the n_prompt prompt tokens


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

    def parse(self, stdout: str) -> Sequence[Record]:
        """Every complete record in the output; a truncated tail is dropped, not an error."""
        ...

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        """Per-repetition figures from the parsed records."""
        ...


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
