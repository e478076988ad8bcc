"""The planner's third verdict: a model that does not fit but runs by paging its weights.

With mmap the weights are file pages: the kernel keeps what it can resident and reads the rest
back from storage when a token needs it. So a cell whose predicted peak is over the phone's
budget still runs if what must stay resident (KV cache, compute buffers, the engine, repacked
weight copies: anonymous memory) fits, and the weights share what is left: the cache.

What a token reads from storage, with ``cache`` bytes for the weights' pages:

- the working set of one token is the dense weights it multiplies (every matrix but the token
  embedding, of which a token reads one row, and but the matrices the CPU backend repacked into
  anonymous copies at load) plus the experts it routes to (``n_expert_used / n_expert`` of the
  expert tensors);
- when the cache is smaller than that working set, least-recently-used reclaim evicts each page
  before the next token needs it again: a token reads its whole working set (measured on the
  virtual phone: three passes over a file 2.5 times the cache each read the whole file);
- when it is larger, the dense part stays resident (every token touches it) and the experts
  share the rest. Were reclaim plain least-recently-used, a routed expert would be resident with
  probability share = (cache - dense) / experts. Linux keeps file pages on two lists: a page
  read once waits on the inactive one and is reclaimed from there unless a second use promotes
  it, so an expert that random routing brings back only now and then is often gone. Measured on
  the virtual phone (synthetic moe, routing independent and uniform per token, 24 tokens):
  hit rates 0.19, 0.50 and 0.82 at shares 0.45, 0.61 and 0.82; a line through them gives
  hit = (share - 1/3) / (2/3), clipped to 0..1 (``HIT_FLOOR``). A token reads the missed share
  of its active experts' bytes; a dense model that fits reads nothing. Real models reuse
  experts from token to token (locality the synthetic one lacks on purpose), so they read less.

The decode speed this allows is storage-bound: storage read speed / bytes per token. Compute
adds to it, so the measured speed is at most this (docs/memory.md, "Bigger than RAM").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.cell import MAPPED_LOAD_MODES, Cell
from harness.units import MB, size

if TYPE_CHECKING:
    from harness.artifacts.gguf_info import ModelInfo
    from harness.memory import MemoryPrediction, ModelCard

HIT_FLOOR = 1 / 3  # the experts' cache share below which routed experts are (almost) never hit


@dataclass(frozen=True)
class PagingPrediction:
    resident: int  # bytes that must stay resident (everything but the mapped weights)
    cache: int  # what the budget leaves for the weights' pages
    dense_bytes: int  # weights every token reads (token embedding and repacked copies out)
    expert_bytes: int  # all experts' tensors
    active_expert_bytes: int  # the experts one token routes to
    read_per_token: int  # predicted storage bytes per generated token
    storage_mb_s: float | None  # the phone's storage read speed
    tg_tps: float | None  # storage-bound decode speed; None: no storage speed known

    @property
    def working_set(self) -> int:
        return self.dense_bytes + self.active_expert_bytes

    def describe(self) -> str:
        speed = (f", storage-bound decode {self.tg_tps:.2f} tok/s at {self.storage_mb_s:g} MB/s"
                 if self.tg_tps is not None and self.storage_mb_s else
                 " (no storage speed known: pass --storage-mb-s)")
        return (f"runs by paging: {size(self.resident)} resident, {size(max(self.cache, 0))} "
                f"left for weights whose tokens read {size(self.working_set)}; reads "
                f"{size(self.read_per_token)} per token{speed}")


def maps_weights(cell: Cell) -> bool:
    """The engine maps the file without locking it, so its pages are reclaimable."""
    return cell.resolved_load_mode in MAPPED_LOAD_MODES and "mlock" not in cell.resolved_load_mode


def predict_paging(cell: Cell, model: ModelInfo | ModelCard, prediction: MemoryPrediction,
                   budget: int, storage_mb_s: float | None) -> PagingPrediction | None:
    """What the cell reads per token when its weights share ``budget`` with the rest; None when
    the weights are not mapped or what must stay resident does not fit at all."""
    if not maps_weights(cell):
        return None
    # weights offloaded to a GPU/NPU live in the device's buffers: never paged, always resident
    pageable = prediction.weights - prediction.device_weights
    resident = prediction.total - pageable
    cache = budget - resident
    if cache <= 0:
        return None
    experts = getattr(model, "expert_tensor_bytes", 0) or 0
    if prediction.device_weights and prediction.weights:
        experts = round(experts * pageable / prediction.weights)
    n_expert = getattr(model, "n_expert", 0) or 0
    used = getattr(model, "n_expert_used", 0) or 0
    embedding = 0 if getattr(model, "tied_embeddings", False) else \
        getattr(model, "token_embd_bytes", 0) or 0
    dense = max(0, pageable - experts - embedding - prediction.repack)
    active = round(experts * used / n_expert) if n_expert and experts else 0
    if cache < dense + active:
        read = dense + active
    elif experts:
        read = round(active * (1 - expert_hit_rate((cache - dense) / experts)))
    else:
        read = 0
    speed = storage_mb_s * MB if storage_mb_s else None
    tg = speed / read if speed and read > 0 else None
    return PagingPrediction(resident, cache, dense, experts, active, read, storage_mb_s, tg)


def expert_hit_rate(share: float) -> float:
    """How often a routed expert is already resident when the experts' pages have ``share`` of
    the bytes they need (the module's two-list reclaim line)."""
    return min(1.0, max(0.0, (share - HIT_FLOOR) / (1 - HIT_FLOOR)))
