"""Figure 12: the sampler's cost when it also reads a GPU's nodes, within one launch.

Figure 1's design (``bench.interleave``) on the virtual GPU phone
(``devices/virtual/gpu-phone.yaml``): one llama-bench launch of the host Vulkan build with
every layer on ``Vulkan0`` generates repetitions in blocks, and the harness's own sampler is
switched on and off block by block, with a placebo arm beside it. On that phone the sampler's
script finds kgsl, so every tick also reads the engine's ``/sys/class/kgsl/kgsl/proc/<pid>``
nodes and every state read the ``kgsl-3d0`` clock, load and thermal level. The trial that
captures the launch is checked for those readings (accelerator memory from kgsl, GPU clock
samples) before the figure counts: a sampler that read no GPU node would make the row meaningless.

lavapipe runs the "GPU" on the host's CPUs. Two settings keep that from standing in for the
sampler's cost, both stated in the figure's data:

- lavapipe gets one worker thread (``LP_NUM_THREADS=1`` in the launch's environment). With its
  default, one per host CPU, the emulated GPU takes both of this host's cores and any sampler
  wake-up delays a thread every dispatch waits for; a phone's GPU is not on the CPU the sampler
  runs on. Figure 1 leaves a core free the same way (one engine thread).
- the phone is cooled (``thermal.heat_c_per_core_s`` 0.2 instead of 0.5): the GPU phone's
  engine keeps two cores busy, which on the stock model reaches SEVERE in about 30 s and stops
  the phone's processes most of each throttle period, the drift of a throttled phone, not the
  sampler's (seen: 6.4 tok/s in the first blocks, 2.5 after).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from bench import interleave
from bench.common import MATRICES, ROOT, Figure, Lab, iqr_text, mean_ci

MATRIX = MATRICES / "gpu-sampler.yaml"
PROFILE = ROOT / "devices" / "virtual" / "gpu-phone.yaml"
BLOCK = 6  # repetitions per block: ~6.6 s at lavapipe's ~7 tok/s for bench Q4_0
N_GEN = 8  # tokens per repetition
# --quick: half the tokens, the same 10 on-blocks (5 pairs a side). Generation is most of the
# figure (22 blocks x 6 x 8 = 1,056 tokens, ~165 s at ~6.4 tok/s, of the 226 s an idle quick
# run took, docs/benchmarks.md);
# a block of ~3.3 s still holds the sampler's 2 s fast start and a second of its steady rate,
# so the on-blocks weigh its costlier start more, not less (a pessimistic bound, as figure 1's
# 1.8 s blocks are).
N_GEN_QUICK = 4
LAVAPIPE = {"LP_NUM_THREADS": "1"}
COOLED = {"heat_c_per_core_s": 0.2}


def gpu_readings(trials: Any, samples: Any) -> dict[str, Any]:
    """What the capturing trial shows the sampler read from the GPU (pure over the tables)."""
    (trial,) = trials.itertuples()
    own = samples[samples["trial_id"] == trial.trial_id]
    clocks = own["gpu_cur_khz"].dropna() if "gpu_cur_khz" in own else own.iloc[:0]
    return {"outcome": trial.outcome, "accelerator_memory_bytes": trial.accelerator_memory_bytes,
            "accelerator_memory_source": trial.accelerator_memory_source,
            "gpu_clock_samples": len(clocks)}


def figure(blocks: list[interleave.Block], readings: dict[str, Any],
           n_gen: int = N_GEN) -> Figure:
    """The target row: mean of the on-block / neighbouring off-block ratios, placebo beside."""
    sched = interleave.paired_ratios(blocks, "sched_tps")
    values, placebo = sched.get("default", []), sched.get("placebo", [])
    mean = sum(values) / len(values) if values else None
    note = ""
    if values:
        low, high = mean_ci(values)
        note = f"CI95 of the mean {low:.3f}-{high:.3f}; "
    if placebo:
        low, high = mean_ci(placebo)
        note += (f"placebo {sum(placebo) / len(placebo):.3f} (CI95 {low:.3f}-{high:.3f}, "
                 f"n={len(placebo)}); ")
    note += ("GPU read by the capturing trial: accelerator memory "
             f"{readings['accelerator_memory_bytes']} B from "
             f"{readings['accelerator_memory_source']}, {readings['gpu_clock_samples']} GPU "
             f"clock samples; a fresh sampler every block of {BLOCK} x {n_gen} tokens")
    read_gpu = (readings["gpu_clock_samples"] > 0
                and str(readings["accelerator_memory_source"]).startswith("kgsl"))
    return Figure("12 GPU sampler: tg ratio default / none, one launch, Vulkan0 all layers",
                  mean, "ratio", iqr_text(values), ">= 0.99",
                  None if mean is None else (mean >= 0.99 and read_gpu), note)


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    from harness import store
    from harness.artifacts.cmake_build import ensure_host_build
    from harness.device.adb import AdbDevice
    from harness.profiles import find_profile
    from harness.virtual.control import start_phones, stop_phones

    seconds: dict[str, float] = {}
    start = time.monotonic()
    ensure_host_build("host-vulkan", lab.builds)
    stock = find_profile(str(PROFILE))
    profile = dataclasses.replace(stock, thermal={**stock.thermal, **COOLED})
    (phone,) = start_phones(profile, 1, home=lab.sim_home, abi="x86_64")
    seconds["build_and_phone"] = time.monotonic() - start
    try:
        device = AdbDevice(phone.serial)
        results = lab.work / "gpu-sampler-results"
        with interleave.capture() as launch:
            lab.run(MATRIX, [device], results, reserve_bytes=0)
        seconds["capturing_run"] = time.monotonic() - start - sum(seconds.values())
        readings = gpu_readings(store.read_table(results, "trials"),
                                store.read_table(results, "samples"))
        if readings["outcome"] != "ok":
            raise RuntimeError(f"the capturing trial on the GPU phone ended {readings}")
        launch.env.update(LAVAPIPE)
        n_gen = N_GEN_QUICK if quick else N_GEN
        blocks, one_launch = interleave.run(device, launch, 10 if quick else 30, BLOCK, n_gen)
        seconds["interleaved_launch"] = time.monotonic() - start - sum(seconds.values())
    finally:
        stop_phones([phone.serial], home=lab.sim_home)
    return [figure(blocks, readings, n_gen)], {
        "readings": readings, "one_launch": one_launch, "matrix": str(MATRIX.relative_to(ROOT)),
        "lavapipe_env": LAVAPIPE, "thermal": COOLED, "n_gen": n_gen, "seconds": seconds}
