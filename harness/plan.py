"""Plan: each cell of a matrix against one device's memory, with a verdict and a duration.

``plan_cells`` is pure (cells + model facts + a memory budget in, verdicts out) so ``harness run``
reuses it unchanged; ``resolve_models`` is the I/O edge that reads GGUF metadata, makes the test
ladder or falls back to a matrix's architecture card. The JSON document built by
``plan_document`` is a stable interface for scripts (``schema_version`` changes when it does).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.artifacts.builds import Build, builds_root, open_build
from harness.artifacts.gguf_info import ModelInfo, read_model_info
from harness.budget import DEFAULT_RESERVE_BYTES, fit
from harness.cell import Cell
from harness.engines import Engine, get_engine
from harness.engines.base import (
    ENGINE_UNSUPPORTED,
    EXCEEDS_CTX,
    NEEDS_FLASH_ATTN,
    support_problem,
)
from harness.errors import ConfigError, HarnessError
from harness.matrix import Matrix
from harness.memory import (
    MemoryPrediction,
    ModelCard,
    estimate_weights_bytes,
    kv_type_fits,
    repacked_types,
)
from harness.memory import predict_peak as _predict_peak
from harness.paging_predict import PagingPrediction, predict_paging
from harness.units import size

SCHEMA_VERSION = 2  # 2: a cell's predicted_device_bytes is named predicted_accelerator_bytes

# Duration heuristic (docs/memory.md, "Estimated duration"): a phone-class CPU, not a device
# model. Prompt processing is compute-bound, decoding is memory-bandwidth-bound.
PP_FLOPS_PER_THREAD = 50e9  # effective FLOP/s per thread on quantised matmuls (NEON dot)
TG_BANDWIDTH = 12e9  # bytes/s streamed while decoding, reached with 4 or more threads
TG_SATURATION_THREADS = 4
LOAD_BANDWIDTH = 1e9  # bytes/s reading the model from flash once per cell
PROCESS_START_S = 1.0  # engine start, model map and context creation per trial
WARMUP_RUNS = 1  # llama-bench runs the test once before the measured repetitions


class Reason(StrEnum):
    """Why a cell is (not) run on a device; the values are what plans and stores spell."""

    FITS = "fits"
    PAGING = "runs_by_paging"  # over the budget, the mapped weights page (paging_predict)
    OVER_BUDGET = "over_budget"
    MODEL_UNAVAILABLE = "model_unavailable"
    KV_TYPE_UNSUPPORTED = "kv_type_unsupported"
    V_CACHE_NEEDS_FLASH_ATTN = NEEDS_FLASH_ATTN
    WORKLOAD_EXCEEDS_CTX = EXCEEDS_CTX
    ENGINE_UNSUPPORTED = ENGINE_UNSUPPORTED


REASON_CODES = tuple(r.value for r in Reason)
RUNNABLE_REASONS = frozenset({Reason.FITS, Reason.PAGING})  # the cells a run tries
# Reasons that make a trial "unsupported" (the engine or the model cannot run the cell at all)
# rather than "skipped_infeasible" (it could, but not within this phone's memory).
UNSUPPORTED_REASONS = frozenset({Reason.KV_TYPE_UNSUPPORTED, Reason.V_CACHE_NEEDS_FLASH_ATTN,
                                 Reason.WORKLOAD_EXCEEDS_CTX, Reason.ENGINE_UNSUPPORTED})


@dataclass(frozen=True)
class MissingModel:
    """No file and no card: the cell cannot be predicted, so it cannot be planned."""

    reason: str


ModelFacts = ModelInfo | ModelCard | MissingModel


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    prediction: MemoryPrediction | None
    budget_bytes: int
    feasible: bool
    reason_code: str  # one of REASON_CODES
    reason: str
    estimated_seconds: float
    paging: PagingPrediction | None = None  # with reason_code runs_by_paging

    @property
    def paging_tg_tps(self) -> float | None:
        """The storage-bound decode speed of a cell that runs by paging (None otherwise)."""
        return self.paging.tg_tps if self.paging is not None and self.reason_code == \
            Reason.PAGING else None

    @property
    def unsupported(self) -> bool:
        """The cell cannot run at all here (as opposed to: not within this phone's memory)."""
        return self.reason_code in UNSUPPORTED_REASONS

    def to_json(self) -> dict[str, Any]:
        cell = self.cell
        pred = self.prediction
        return {
            "cell_id": cell.cell_id,
            "config_id": cell.config_id,
            "label": display_label(cell),
            **cell.identity(),
            "load_mode": cell.resolved_load_mode,
            "cache": cell.cache or None,
            "repetitions": cell.repetitions,
            "predicted_peak_bytes": pred.total if pred else None,
            "predicted_host_bytes": pred.host if pred else None,
            "predicted_accelerator_bytes": pred.device if pred else None,
            "predicted": pred.terms() if pred else None,
            "feasible": self.feasible,
            "reason_code": self.reason_code,
            "reason": self.reason,
            "estimated_seconds": round(self.estimated_seconds, 1),
            "paging": _paging_json(self.paging) if self.reason_code == Reason.PAGING else None,
        }


def _paging_json(paging: PagingPrediction | None) -> dict[str, Any] | None:
    if paging is None:
        return None
    return {"resident_bytes": paging.resident, "cache_bytes": paging.cache,
            "working_set_bytes": paging.working_set,
            "read_bytes_per_token": paging.read_per_token,
            "storage_read_mb_s": paging.storage_mb_s,
            "predicted_tg_tps": round(paging.tg_tps, 3) if paging.tg_tps else None}


def display_label(cell: Cell) -> str:
    return cell.label()


def _n_params(model: ModelInfo | ModelCard) -> int:
    return model.n_params


def _weights(model: ModelInfo | ModelCard, quant: str) -> int:
    if isinstance(model, ModelCard):
        return estimate_weights_bytes(model, quant)
    return model.tensor_bytes


def estimate_seconds(
    cell: Cell, model: ModelInfo | ModelCard, trial_timeout_s: float | None = None,
    paging: PagingPrediction | None = None,
) -> float:
    """A rough wall time for all repetitions of a cell (heuristic, not a device model); a cell
    that pages decodes at its storage-bound speed, when one is predicted."""
    threads = cell.threads
    effective = min(threads, 4) + max(0, threads - 4) * 0.5  # extra threads land on small cores
    flops_per_token = 2 * _n_params(model)
    prompt_tokens = cell.n_depth + cell.n_prompt
    prompt_s = prompt_tokens * flops_per_token / (PP_FLOPS_PER_THREAD * effective)
    bandwidth = TG_BANDWIDTH * min(threads, TG_SATURATION_THREADS) / TG_SATURATION_THREADS
    gen_s = cell.n_gen * _weights(model, cell.quant) / bandwidth
    if paging is not None and paging.tg_tps:
        gen_s = max(gen_s, cell.n_gen / paging.tg_tps)
    per_trial = PROCESS_START_S + prompt_s + gen_s
    if cell.sustained_s:  # one calibration launch, then the duration (at least) per trial
        per_trial = max(per_trial, cell.sustained_s) + PROCESS_START_S + prompt_s + gen_s
    if trial_timeout_s is not None and not cell.sustained_s:
        per_trial = min(per_trial, trial_timeout_s)
    load_s = _weights(model, cell.quant) / LOAD_BANDWIDTH
    warmups = 0 if cell.sustained_s else WARMUP_RUNS  # a sustained launch is one long run
    return load_s + (cell.repetitions + warmups) * per_trial


@dataclass(frozen=True)
class _Verdict:
    prediction: MemoryPrediction | None
    code: str
    reason: str
    paging: PagingPrediction | None = None


def _verdict(
    cell: Cell, model: ModelFacts, available: int, reserve: int,
    repack: frozenset[str] = frozenset(), engine: Engine | None = None,
    storage_mb_s: float | None = None, driver: int = 0,
) -> _Verdict:
    budget = available - reserve
    found = _memory_verdict(cell, model, available, reserve, repack, engine, driver)
    if found[1] != Reason.OVER_BUDGET or isinstance(model, MissingModel) or found[0] is None:
        return _Verdict(*found)
    paging = predict_paging(cell, model, found[0], budget, storage_mb_s)
    if paging is None:
        return _Verdict(*found)
    if paging.read_per_token == 0:  # only weights no token reads are left out
        return _Verdict(found[0], Reason.FITS, f"predicted {size(found[0].total)} > budget "
                        f"{size(budget)}, but the weights its tokens read "
                        f"({size(paging.working_set)}) fit the {size(paging.cache)} left: pages "
                        "it never reads need not be resident", paging)
    return _Verdict(found[0], Reason.PAGING, f"predicted {size(found[0].total)} > budget "
                    f"{size(budget)}; {paging.describe()}", paging)


def _memory_verdict(
    cell: Cell, model: ModelFacts, available: int, reserve: int,
    repack: frozenset[str] = frozenset(), engine: Engine | None = None, driver: int = 0,
) -> tuple[MemoryPrediction | None, str, str]:
    if isinstance(model, MissingModel):
        return None, Reason.MODEL_UNAVAILABLE, model.reason
    for kv_type, dim in ((cell.type_k, model.head_dim_k), (cell.type_v, model.head_dim_v)):
        if not kv_type_fits(kv_type, model.n_head_kv * dim):
            return None, Reason.KV_TYPE_UNSUPPORTED, (
                f"{kv_type} cache needs rows in blocks of 32 values; this model's row has "
                f"{model.n_head_kv * dim}"
            )
    prediction = _predict_peak(cell, model, repack, driver)
    problem = support_problem(engine or get_engine(cell.engine), cell)
    if problem is not None:
        return prediction, problem[0], problem[1]
    verdict = fit(prediction.total, available, reserve)
    return prediction, Reason.FITS if verdict.fits else Reason.OVER_BUDGET, verdict.reason


def build_repack(builds: Mapping[str, Build]) -> dict[str, frozenset[str]]:
    """Per build, the weight types its CPU code repacks (unknown features: none)."""
    out: dict[str, frozenset[str]] = {}
    for name, build in builds.items():
        cpu = build.manifest.cpu
        out[name] = repacked_types(cpu.arch, cpu.enabled) if cpu else frozenset()
    return out


def matrix_repack(matrix: Matrix, builds_dir: Path | None = None) -> dict[str, frozenset[str]]:
    """``build_repack`` of the matrix's builds found under the builds folder: what ``plan``
    and ``recommend`` give ``plan_cells``, as a run does with the builds it opened (a build
    not found repacks nothing: a run would refuse it before planning)."""
    found = {}
    for name in matrix.axes.get("build", ()):
        try:
            found[name] = open_build(builds_root(builds_dir), str(name))
        except HarnessError:
            continue
    return build_repack(found)


def plan_cells(
    cells: Iterable[Cell],
    models: Mapping[tuple[str, str], ModelFacts],
    available_bytes: int,
    reserve: int = DEFAULT_RESERVE_BYTES,
    trial_timeout_s: float | None = None,
    repack: Mapping[str, frozenset[str]] | None = None,
    engines: Mapping[str, Engine] | None = None,
    storage_mb_s: float | None = None,
    drivers: Mapping[str, int] | None = None,
) -> list[PlannedCell]:
    """Verdict, prediction and duration for each cell; ``models`` is keyed by (model, quant).

    ``repack`` gives, per build name, the weight types that build repacks (``memory.
    repacked_types``); a build not named repacks nothing. Whether a cell can run at all is its
    engine's answer (``Engine.supports``); ``engines`` maps a cell's engine name to its adapter
    (default: ``harness.engines.get_engine``).

    The budget is ``available_bytes - reserve``: the reserve is headroom for the rest of the
    phone (and the predictor's error). Infeasible cells are estimated at 0 s: they are skipped.
    A cell over the budget whose mapped weights can page runs (``runs_by_paging``), its decode
    speed predicted from ``storage_mb_s`` (the phone's storage read speed, MB/s) when known.
    ``drivers`` gives, per build name, what its GPU drivers hold in the process on this phone
    (``driver_costs``: measured by a run's probe); a build not named adds nothing.
    """
    budget = available_bytes - reserve
    planned = []
    for cell in cells:
        key = (cell.model, cell.quant)
        model = models.get(key, MissingModel(f"no facts for model {cell.model} {cell.quant}"))
        types = (repack or {}).get(cell.build, frozenset())
        engine = (engines or {}).get(cell.engine) or get_engine(cell.engine)
        verdict = _verdict(cell, model, available_bytes, reserve, types, engine, storage_mb_s,
                           (drivers or {}).get(cell.build, 0))
        feasible = verdict.code in RUNNABLE_REASONS
        seconds = (
            estimate_seconds(cell, model, trial_timeout_s, verdict.paging)
            if feasible and not isinstance(model, MissingModel)
            else 0.0
        )
        planned.append(
            PlannedCell(
                cell=cell,
                prediction=verdict.prediction,
                budget_bytes=budget,
                feasible=feasible,
                reason_code=verdict.code,
                reason=verdict.reason,
                estimated_seconds=seconds,
                paging=verdict.paging,
            )
        )
    return planned


def summarize(planned: list[PlannedCell]) -> dict[str, Any]:
    feasible = [p for p in planned if p.feasible]
    peaks = [p.prediction.total for p in feasible if p.prediction]
    return {
        "cells": len(planned),
        "feasible": len(feasible),
        "infeasible": len(planned) - len(feasible),
        "reasons": dict(sorted(Counter(p.reason_code for p in planned).items())),
        "estimated_seconds": round(sum(p.estimated_seconds for p in planned), 1),
        "max_feasible_peak_bytes": max(peaks) if peaks else None,
    }


def plan_document(
    matrix: Matrix,
    device: Mapping[str, Any] | None,
    available_bytes: int,
    reserve: int,
    planned: list[PlannedCell],
) -> dict[str, Any]:
    """The stable JSON form of a plan for one device (see docs/matrices.md)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "matrix": {"name": matrix.name, "source": matrix.source},
        "device": dict(device) if device is not None else None,
        "available_bytes": available_bytes,
        "reserve_bytes": reserve,
        "budget_bytes": available_bytes - reserve,
        "cells": [p.to_json() for p in planned],
        "summary": summarize(planned),
    }


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "size") -> int:
    """``6GiB``, ``512MiB``, ``6G`` (binary) or ``6GB`` (decimal) or plain bytes, as bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(
            f"{what}: {text!r} is not a size (examples: 6GiB, 512MiB, 6G, 6000MB, 1073741824)"
        )
    number, prefix, suffix = match.groups()
    power = "KMGT".find(prefix.upper()) + 1 if prefix else 0
    decimal = suffix.upper() == "B" and bool(prefix)  # GB, MB: powers of 1000
    return int(float(number) * (1000 if decimal else 1024) ** power)


LadderResolver = Callable[[str], Mapping[str, Path]]


def _default_ladder(size: str) -> Mapping[str, Path]:
    from harness.artifacts.testmodels import ensure_ladder

    return ensure_ladder(size)


def resolve_models(
    matrix: Matrix, cells: Iterable[Cell], ladder: LadderResolver | None = None
) -> dict[tuple[str, str], ModelFacts]:
    """Facts for every (model, quant) the cells use: GGUF metadata, else the card, else missing.

    This is the I/O edge of planning: it reads model headers and may make the synthetic ladder.
    A file that exists but is not a sound GGUF raises ``ModelError`` (the user must know).
    """
    resolver = ladder or _default_ladder
    ladders: dict[str, Mapping[str, Path] | MissingModel] = {}
    facts: dict[tuple[str, str], ModelFacts] = {}
    for cell in cells:
        key = (cell.model, cell.quant)
        if key in facts:
            continue
        source = matrix.models[cell.model]
        if source.ladder is not None:
            if source.ladder not in ladders:
                try:
                    ladders[source.ladder] = resolver(source.ladder)
                except ImportError:
                    ladders[source.ladder] = MissingModel(
                        "the test-model ladder (harness.artifacts.testmodels) is not available"
                    )
                except HarnessError as error:
                    ladders[source.ladder] = MissingModel(f"ladder {source.ladder}: {error}")
            files = ladders[source.ladder]
            if isinstance(files, MissingModel):
                facts[key] = files
            elif cell.quant not in files:
                facts[key] = MissingModel(
                    f"the {source.ladder} ladder has no {cell.quant} (it has {', '.join(files)})"
                )
            else:
                facts[key] = read_model_info(files[cell.quant])
            continue
        path = source.path_for(cell.quant)
        if path is not None and path.is_file():
            facts[key] = read_model_info(path)
        elif source.card is not None:
            facts[key] = source.card
        else:
            facts[key] = MissingModel(f"{path} is absent and models.{cell.model} has no card")
    return facts
