"""A configuration's worst peak with its accelerator (GPU/NPU) memory, never without it.

On a phone a GPU's buffers are its RAM, and the low-memory killer counts them. Per trial the
peak is the largest of its sampled PSS, its VmHWM, and its host memory plus its accelerator
memory.
Where the phone could not say one of the two shares of a trial that ran on a device:

- its accelerator memory unreadable (a Mali phone without GpuService, an OEM build without the
  memtrack HAL): the predictor's accelerator share (``predicted_accelerator_bytes``) stands for
  it, and the peak says so (``PREDICTED``);
- its host share unknown (GpuService gives the device's total, not how much of it the process's
  PSS holds): the process's own peak stands for it. On a Mali phone the GPU's pages are not in
  the process's RSS, so the device's share is added to it; where they are (lavapipe, whose
  buffers live in the process) the sum counts them twice, which errs on the side that fits.

A trial on a device with neither a reading nor a prediction (a store from before the predictor
split the peak) keeps the process's peak, marked ``UNKNOWN``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.knobs import CPU_DEVICE

READ = "read"
PREDICTED = "predicted"
UNKNOWN = "unknown"
# what a pick and a fit verdict say of a peak whose device share is not the phone's reading
SAYS = {PREDICTED: "accelerator memory predicted, not read",
        UNKNOWN: "accelerator memory neither read nor predicted: the process's peak alone"}


@dataclass(frozen=True)
class WorstPeak:
    bytes: int | None
    # where the device share of the counted trials came from: read, predicted or unknown (the
    # least certain of them); None when none ran on a device
    accelerator_memory: str | None = None

    @property
    def says(self) -> str | None:
        """The words a pick carries about its peak's device share (None: it was read)."""
        return SAYS.get(self.accelerator_memory or "")


def _numbers(ok: pd.DataFrame, name: str) -> pd.Series:
    if name not in ok:
        return pd.Series(float("nan"), index=ok.index, dtype="float64")
    return pd.to_numeric(ok[name], errors="coerce").astype("float64")


def on_device(ok: pd.DataFrame) -> pd.Series:
    """The trials that asked for a compute device (a store from before the knob: none did)."""
    if "compute_device" not in ok:
        return pd.Series(False, index=ok.index)
    device = ok["compute_device"].astype(object)
    return device.notna() & (device != CPU_DEVICE)


def worst_peak(ok: pd.DataFrame) -> WorstPeak:
    """The worst trial's peak (its sampled RSS where nothing else was read), and whether its
    device share was read, predicted or unknown."""
    process = pd.concat([_numbers(ok, "peak_pss_bytes"), _numbers(ok, "vm_hwm_bytes")],
                        axis=1).max(axis=1, skipna=True)
    asked = on_device(ok)
    read = _numbers(ok, "accelerator_memory_bytes")
    device = read.where(read.notna() | ~asked, _numbers(ok, "predicted_accelerator_bytes"))
    host = _numbers(ok, "host_memory_bytes")
    host = host.where(host.notna() | ~asked | device.isna(), process)
    peaks = pd.concat([process, host + device], axis=1).max(axis=1, skipna=True).dropna()
    if peaks.empty:
        peaks = _numbers(ok, "peak_rss_bytes").dropna()
    value = int(peaks.max()) if not peaks.empty else None
    if not asked.any():
        return WorstPeak(value)
    state = (UNKNOWN if (asked & device.isna()).any() else
             PREDICTED if (asked & read.isna()).any() else READ)
    return WorstPeak(value, state)


def driver_costs(trials: pd.DataFrame, device: str) -> dict[str, int]:
    """Per build, what its GPU drivers held in the process on ``device`` (a serial or a device
    model), as the runs' probes measured it (the median of its trials' ``driver_host_bytes``):
    what ``plan_cells`` adds to the predictions of that build's cells there."""
    if "driver_host_bytes" not in trials or trials.empty:
        return {}
    mine = trials[(trials["device_serial"] == device) | (trials["device_model"] == device)]
    measured = mine.assign(driver=_numbers(mine, "driver_host_bytes")).dropna(subset=["driver"])
    return {str(build): int(group["driver"].median())
            for build, group in measured.groupby("build_id", observed=True)}
