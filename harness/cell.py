"""A cell: one point of a test matrix, independent of the device it runs on.

Cells are made by ``harness.matrix.expand`` and consumed by the planner, the engine adapters and
the store. ``cell_id`` is a stable hash of everything that defines the measurement (the number of
repetitions is policy, not identity); ``config_id`` leaves the build and the engine out, so
the same configuration measured with two builds, or two engines, can be paired for a comparison.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from harness import knobs
from harness.labels import config_label

KV_TYPES = knobs.KV_TYPES
# the load modes and page-cache states, as the registry declares them
LOAD_MODES, MAPPED_LOAD_MODES, CACHE_STATES = (knobs.LOAD_MODES, knobs.MAPPED_LOAD_MODES,
                                               knobs.CACHE_STATES)
FLASH_ATTN = knobs.FLASH_ATTN
DEFAULT_ENGINE = "llama-bench"
# The build of a llama-cpp-python cell: whatever llama-cpp-python the device's Python has (its
# version is read on the device and stored per trial).
DEVICE_PYTHON_BUILD = "device-python"


@dataclass(frozen=True)
class Cell:
    build: str  # name of a build under builds/
    model: str  # model name as the matrix declares it
    quant: str  # quant level, e.g. Q4_K_M (llama.cpp file-type names)
    n_ctx: int
    type_k: str  # KV cache type of K, one of KV_TYPES
    type_v: str
    threads: int
    affinity: str  # "all", "big", or an explicit CPU mask such as "0xf0"
    flash_attn: str  # "on", "off" or "auto"
    mmap: bool
    n_batch: int
    n_ubatch: int
    n_prompt: int
    n_gen: int
    n_depth: int = 0
    repetitions: int = 3
    # Full-size cache for sliding-window layers (llama.cpp's swa_full). False is what llama-bench
    # always uses; it stays out of the ids, so cells from before this knob keep theirs.
    swa_full: bool = knobs.default("swa_full")
    # The engine adapter that runs the cell (harness.engines.get_engine). The default stays out
    # of the ids, so cells from before engines were an axis keep theirs.
    engine: str = DEFAULT_ENGINE
    # Sustained workload: generate back to back for this many seconds (0: a burst cell, one
    # repetition per trial). Out of the ids when 0, so burst cells keep theirs.
    sustained_s: float = 0.0
    # The engine's load mode beyond what ``mmap`` says ("" : mmap or none, as ``mmap`` says);
    # out of the ids when empty, so cells from before this knob keep theirs.
    load_mode: str = knobs.default("load_mode")
    # The model's page cache at launch: "cold", "warm", or "" (as the phone has it). Out of
    # the ids when empty.
    cache: str = knobs.default("cache")
    # Where the model runs (harness.knobs): llama.cpp's device name, "none" for the CPU only,
    # and the layers offloaded to it (-1: all). Out of the ids at their defaults.
    compute_device: str = knobs.default("compute_device")
    n_gpu_layers: int = knobs.default("n_gpu_layers")
    # The values of the knobs declared in harness.knobs alone (no field of their own here):
    # (name, value) pairs in registry order, each in the ids unless at its default.
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.load_mode == knobs.load_mode_of(self.mmap):  # one spelling per cell
            object.__setattr__(self, "load_mode", "")
        elif self.load_mode and self.mmap != (self.load_mode in MAPPED_LOAD_MODES):
            raise ValueError(f"load_mode {self.load_mode} contradicts mmap={self.mmap}")

    @property
    def resolved_load_mode(self) -> str:
        """The load mode to ask the engine for (llama.cpp's names)."""
        return knobs.load_mode_of(self.mmap, self.load_mode)

    def value(self, name: str) -> Any:
        """The value of the registry's knob ``name``: its field, or ``extra``, or its default."""
        knob = knobs.spec(name)
        if knob.attribute:
            return getattr(self, name)
        return dict(self.extra).get(name, knob.default)

    def knob_values(self) -> dict[str, Any]:
        """Every knob of the registry: name -> value (``harness.knobs.engine_args`` reads it)."""
        return {spec.name: self.value(spec.name) for spec in knobs.KNOBS}

    def identity(self, with_build: bool = True) -> dict[str, Any]:
        """What defines the measurement; without the build, the *configuration*: the knobs
        that stay when one compares two builds or two engines on the same phone."""
        data = asdict(self)
        data.pop("repetitions")
        data.pop("extra")
        data.update(self.knob_values())
        if not data["sustained_s"]:
            data.pop("sustained_s")
        for spec in knobs.KNOBS:
            if spec.quiet_in_ids and data[spec.name] == spec.default:
                data.pop(spec.name)
        if data["engine"] == DEFAULT_ENGINE or not with_build:
            data.pop("engine")
        if not with_build:
            data.pop("build")
        return data

    @property
    def cell_id(self) -> str:
        return _digest(self.identity())

    @property
    def config_id(self) -> str:
        return _digest(self.identity(with_build=False))

    def setup_label(self) -> str:
        """What runs the cell, e.g. ``host-release``, ``llama-cpp-python`` or ``mnn.yaml@b1``."""
        if self.engine == DEFAULT_ENGINE:
            return self.build
        if self.build == DEVICE_PYTHON_BUILD:
            return self.engine
        return f"{self.engine}@{self.build}"

    def row(self) -> dict[str, Any]:
        """The configuration as a trial stores it (``harness.labels`` reads this form)."""
        return {"model_name": self.model, "quant": self.quant, "n_ctx": self.n_ctx,
                "type_k": self.type_k, "type_v": self.type_v, "threads": self.threads,
                "affinity": self.affinity, "flash_attn": self.flash_attn,
                "n_prompt": self.n_prompt, "n_gen": self.n_gen, "n_depth": self.n_depth,
                "mmap": self.mmap, "sustained_s": self.sustained_s or None,
                **{k.column: self.value(k.name) for k in knobs.KNOBS if k.attribute},
                "load_mode": self.resolved_load_mode, "cache": self.cache or None,
                knobs.EXTRA_COLUMN: knobs.extras_text(self.knob_values())}

    def label(self) -> str:
        """Every knob of the configuration (``harness.labels.config_label``), e.g.
        ``tiny Q4_K_M ctx512 kv=q8_0 t4 fa=auto p32/g16 b256/ub128``."""
        return config_label(self.row())


def _digest(data: dict[str, Any]) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
