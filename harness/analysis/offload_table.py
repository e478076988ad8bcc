"""Where the model ran, per device and candidate: the CPU, a GPU/NPU, or a partial offload.

One row per (device, config, build, engine) whose trials asked for a compute device or whose
phone reported accelerator memory. Medians over the ok trials: decode and prompt speed, the
host's and the accelerator's memory as the phone reported them (with the source, or why unreadable)
against the predictor's split, llama.cpp's own device buffers, the layers it says it offloaded,
GPU throttling and temperature, and the output check of that device. Pure: the report and
scripts read the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.sustained import candidate_groups, column, median
from harness.knobs import CPU_DEVICE, gpu_layers_text, offload_of
from harness.labels import config_label


@dataclass(frozen=True)
class OffloadRow:
    device: str  # serial
    config_id: str
    build_id: str
    engine: str
    label: str
    compute_device: str
    n_gpu_layers: str  # as the matrix says it: 0, a count, all
    trials: int
    ok: int
    tg_tps: float | None
    pp_tps: float | None
    host_bytes: float | None  # the phone's report: the process less its device buffers
    predicted_host_bytes: float | None
    device_bytes: float | None  # the phone's report (kgsl, dumpsys graphics)
    device_source: str | None  # where from, or "unreadable: ..."
    predicted_accelerator_bytes: float | None
    reported_device_bytes: float | None  # llama.cpp's own buffers (its log)
    offloaded: str | None  # "9/9": what llama.cpp says it put on the device
    gpu_throttled: int  # ok trials with the GPU's clock capped
    max_gpu_temp_c: float | None
    gpu_emulated: str | None
    output_check: str | None  # the check's statuses over the trials, e.g. "match"

    @property
    def device_error(self) -> float | None:
        """Measured accelerator memory over predicted, less one (None: either is missing)."""
        if self.device_bytes is None or not self.predicted_accelerator_bytes:
            return None
        return self.device_bytes / self.predicted_accelerator_bytes - 1


def _text(values: pd.Series) -> str | None:
    found = sorted({str(v) for v in values.dropna()})
    return ", ".join(found) or None


def _row(key: tuple[str, ...], group: pd.DataFrame) -> OffloadRow:
    ok = group[group["outcome"] == "ok"]
    first = group.iloc[0].to_dict()
    layers = pd.to_numeric(column(ok, "offloaded_layers"), errors="coerce").dropna()
    total = pd.to_numeric(column(ok, "model_layers"), errors="coerce").dropna()
    offloaded = (f"{int(layers.median())}/{int(total.median())}"
                 if not layers.empty and not total.empty else None)
    device, ngl = offload_of(first)
    return OffloadRow(
        device=key[0], config_id=key[1], build_id=key[2], engine=key[3],
        label=config_label(first),
        compute_device=device, n_gpu_layers=gpu_layers_text(ngl),
        trials=len(group), ok=len(ok),
        tg_tps=median(column(ok, "tg_tps")), pp_tps=median(column(ok, "pp_tps")),
        host_bytes=median(column(ok, "host_memory_bytes")),
        predicted_host_bytes=median(column(group, "predicted_host_bytes")),
        device_bytes=median(column(ok, "accelerator_memory_bytes")),
        device_source=_text(column(ok, "accelerator_memory_source")),
        predicted_accelerator_bytes=median(column(group, "predicted_accelerator_bytes")),
        reported_device_bytes=median(column(ok, "device_reported_bytes")),
        offloaded=offloaded,
        gpu_throttled=int((column(ok, "gpu_throttled").astype(object) == True).sum()),  # noqa: E712
        max_gpu_temp_c=median(column(ok, "max_gpu_temp_c")),
        gpu_emulated=_text(column(group, "gpu_emulated")),
        output_check=_text(column(ok, "output_check")),
    )


def offload_table(trials: pd.DataFrame) -> tuple[OffloadRow, ...]:
    """The candidates that asked for a compute device, or whose phone reported accelerator
    memory."""
    if trials.empty or "compute_device" not in trials:
        return ()
    device = column(trials, "compute_device").astype(object)
    asked = device.notna() & (device != CPU_DEVICE)
    reported = column(trials, "accelerator_memory_bytes").notna()
    wanted = (asked | reported).to_numpy()
    if not wanted.any():
        return ()
    rows = [_row(key, group) for key, group in candidate_groups(trials, wanted)]
    return tuple(sorted(rows, key=lambda r: (r.device, r.label, r.build_id, r.engine)))
