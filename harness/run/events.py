"""What a run tells its caller as it goes: one vocabulary for the local runner, the farm and the
progress display.

Events reach an ``Event`` callback as ``(kind, serial, details)``. ``kind`` is a ``Kind`` (a
``str``, so the farm can ship it through Dask's event topic and old callbacks keep working);
``details`` carries the figures named beside each kind.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    PLANNED = "planned"  # total, todo, runnable trials of this device
    PUSH = "push"  # name, done, total bytes of the file being pushed
    PUSHED = "pushed"  # bytes, files, reused
    PUSH_FAILED = "push_failed"  # error
    ABI_MISMATCH = "abi_mismatch"  # error: the device cannot run an (engine, build) at all
    TRIAL = "trial"  # index, total, label, build, runs_on, trial_id: a trial starts
    DONE = "done"  # outcome, tg_tps, pp_tps, timings (a run trial's laps): a trial was stored
    PRECONDITION_FAILED = "precondition_failed"  # error: the phone and the requirement
    RECONNECTING = "reconnecting"  # seconds it is waited for
    RECONNECTED = "reconnected"
    LOST = "lost"  # error: gone for good; its remaining trials were not run
    FAILED = "failed"  # error: the device's run stopped (busy, harness error)
    JOB = "job"  # key, trials: a farm job starts on its phone
    WAITING = "waiting"  # grace_s: the farm waits for a phone's worker to come back
    ADAPTIVE = "adaptive"  # candidate, baseline, label, step, reason, repetitions: a pair settled
    OUTPUT_CHECK = "output_check"  # build, model, quant, knobs, status, detail: output checked
    DEVICES = "devices"  # build, devices, error, driver_bytes: a build's compute devices here


ERRORS = frozenset({Kind.LOST, Kind.FAILED, Kind.PUSH_FAILED, Kind.ABI_MISMATCH})
# What a farm worker relays to the driver as it happens (the rest arrives with the job's result).
FORWARDED = frozenset({Kind.JOB, Kind.TRIAL, Kind.PUSH, Kind.PUSHED, Kind.PUSH_FAILED,
                       Kind.ABI_MISMATCH, Kind.RECONNECTING, Kind.RECONNECTED, Kind.ADAPTIVE,
                       Kind.OUTPUT_CHECK, Kind.DEVICES})

Event = Callable[[str, str, dict[str, Any]], None]  # (kind, serial, details)
