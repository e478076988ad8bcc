"""An in-process llama.cpp bench through llama-cpp-python's low-level API.

For devices where a Python with llama-cpp-python is the engine (this host, Termux on a phone),
this measures what llama-bench measures, the same way: a warm-up decode, then per repetition a
prompt test (n_prompt tokens decoded in n_batch chunks) and a generation test (n_gen single-token
decodes), each after an untimed fill of n_depth tokens, with the KV cache cleared in between.
It prints one JSONL line per test with llama-bench's key names, so ``llama_bench.parse_output``
and the same measurement mapping read it. Unlike llama-bench it honours ``--n-ctx`` directly.

    python -m harness.engines.pybench --model M.gguf --n-prompt 32 --n-gen 16 --reps 2
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import knobs
from harness.cell import LOAD_MODES, Cell
from harness.engines.base import (
    EngineOutput,
    Measurement,
    Record,
    affinity_mask,
    as_output,
    common_problem,
    flash_attn_setting,
    require_supported,
)
from harness.engines.llama_bench import measure_records, parse_output, record_from_dict

_FLASH = {"auto": -1, "off": 0, "on": 1}
ENGINE = "llama-cpp-python"


def flag(name: str) -> str:
    """This tool's option for the registry's knob ``name`` (``--n-ubatch``, ...)."""
    return knobs.flag(name, ENGINE)


@dataclass(frozen=True)
class PyBench:
    """Adapter for ``python -m harness.engines.pybench`` (``Engine`` protocol).

    ``binary_path`` is the Python interpreter on the device.
    """

    name: str = ENGINE
    # the device's llama-cpp-python can offload (llama_supports_gpu_offload), as probed
    gpu_offload: bool = False

    def supports(self, cell: Cell) -> str | None:
        common = common_problem(cell)
        if common:
            return common[1]
        if cell.affinity != "all":
            return "llama-cpp-python cannot pin threads to CPUs; use affinity 'all'"
        offload = knobs.offload_problem(cell.compute_device, cell.n_gpu_layers)
        if offload:
            return offload
        if cell.compute_device != knobs.CPU_DEVICE and not self.gpu_offload:
            return (f"this llama-cpp-python has no GPU backend (llama_supports_gpu_offload is "
                    f"false), so device {cell.compute_device} cannot be used; install a wheel "
                    "built with one (CMAKE_ARGS=-DGGML_VULKAN=ON ...)")
        return None

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        affinity_mask(cell, cpu_mask)
        flash, _ = flash_attn_setting(cell)
        return [
            binary_path, "-m", "harness.engines.pybench", "--model", model_path,
            "--n-prompt", str(cell.n_prompt), "--n-gen", str(cell.n_gen),
            "--n-depth", str(cell.n_depth), "--n-ctx", str(cell.n_ctx),
            flag("threads"), str(cell.threads), flag("type_k"), cell.type_k,
            flag("type_v"), cell.type_v,
            flag("flash_attn"), str(flash), flag("load_mode"), cell.resolved_load_mode,
            flag("n_batch"), str(cell.n_batch), flag("n_ubatch"), str(cell.n_ubatch),
            "--reps", str(cell.repetitions), "--verbose",
            flag("compute_device"), cell.compute_device,
            flag("n_gpu_layers"), str(cell.n_gpu_layers),
            "--swa-full" if cell.swa_full else "--no-swa-full",
        ]

    def parse(self, output: EngineOutput | str) -> list[Record]:
        return list(parse_output(as_output(output).stdout))

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        return measure_records([record_from_dict(r.as_dict(), r.raw) for r in records])


def _load_mode(llama: Any, name: str) -> int:
    """llama.cpp's LLAMA_LOAD_MODE_* constant of a load mode's name."""
    value = getattr(llama, "LLAMA_LOAD_MODE_" + name.upper().replace("+", "_").replace(
        "DIO", "DIRECT_IO"), None)
    if value is None:
        raise SystemExit(f"pybench: this llama-cpp-python has no load mode {name!r}")
    return int(value)


def _ggml_type(llama: Any, name: str) -> int:
    value = getattr(llama, f"GGML_TYPE_{name.upper()}", None)
    if value is None:
        raise SystemExit(f"pybench: unknown KV cache type {name!r}")
    return int(value)


def _select_device(llama: Any, mparams: Any, name: str) -> Any:
    """Offload only to ``name`` (``none``: no device at all, the CPU only), as llama-bench's
    ``-dev``; returns the ctypes list, which must outlive the model load."""
    if name != knobs.CPU_DEVICE and not llama.llama_supports_gpu_offload():
        raise SystemExit(f"pybench: this llama-cpp-python has no GPU backend for {name}")
    by_name = getattr(llama, "ggml_backend_dev_by_name", None)
    if name == knobs.CPU_DEVICE:
        devices = (ctypes.c_void_p * 1)()  # an empty, NULL-terminated list
    elif by_name is not None and (found := by_name(name.encode())):
        devices = (ctypes.c_void_p * 2)(found)
    else:
        raise SystemExit(f"pybench: this llama-cpp-python cannot select device {name}")
    mparams.devices = ctypes.addressof(devices)  # a c_void_p field: the list's address
    return devices


def run(args: argparse.Namespace) -> int:
    import llama_cpp as llama  # imported here: the adapter above must not need it

    if not args.verbose:
        silent = llama.llama_log_callback(lambda level, text, user: None)
        llama.llama_log_set(silent, ctypes.c_void_p(0))
        args._keep_callback = silent  # keep the ctypes callback alive
    llama.llama_backend_init()
    mparams = llama.llama_model_default_params()
    mparams.load_mode = _load_mode(llama, args.load_mode)
    mparams.n_gpu_layers = args.n_gpu_layers
    args._devices = _select_device(llama, mparams, args.device)  # alive through the load
    model = llama.llama_model_load_from_file(str(args.model).encode(), mparams)
    if not model:
        print(f"pybench: cannot load {args.model}", file=sys.stderr)
        return 1
    n_ctx = args.n_ctx or (args.n_prompt + args.n_gen + args.n_depth)
    cparams = llama.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = args.n_batch
    cparams.n_ubatch = args.n_ubatch
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.type_k = _ggml_type(llama, args.type_k)
    cparams.type_v = _ggml_type(llama, args.type_v)
    cparams.flash_attn_type = _FLASH[args.flash_attn]
    cparams.swa_full = args.swa_full
    ctx = llama.llama_init_from_model(model, cparams)
    if not ctx:
        print("pybench: cannot create a context with these settings", file=sys.stderr)
        return 1
    if args.load_only:  # the model and context exist: llama.cpp has logged their sizes
        llama.llama_free(ctx)
        llama.llama_model_free(model)
        return 0
    bench = _Bench(llama, model, ctx, args.n_batch)
    desc = ctypes.create_string_buffer(256)
    llama.llama_model_desc(model, desc, len(desc))
    common = {
        "build_commit": f"llama-cpp-python-{llama.__version__}", "build_number": 0,
        "cpu_info": "", "backends": "CPU", "model_filename": str(args.model),
        "model_type": desc.value.decode(errors="replace"),
        "model_size": int(llama.llama_model_size(model)),
        "model_n_params": int(llama.llama_model_n_params(model)),
        "n_batch": args.n_batch, "n_ubatch": args.n_ubatch, "n_threads": args.threads,
        "type_k": args.type_k, "type_v": args.type_v, "flash_attn": _FLASH[args.flash_attn],
        "load_mode": args.load_mode, "n_ctx": n_ctx, "n_gpu_layers": args.n_gpu_layers,
        "devices": args.device,
        "swa_full": bool(args.swa_full),
    }
    try:
        bench.decode_random(min(args.n_batch, max(args.n_prompt, 1)), 0)  # warm-up
        if args.verbose:  # llama.cpp's own "load time" (until this first batch), as llama-bench
            llama.llama_perf_context_print(ctx)  # logs it after each test
        if args.n_prompt:
            samples = [bench.prompt(args.n_prompt, args.n_depth) for _ in range(args.reps)]
            _emit(common, args.n_prompt, 0, args.n_depth, args.n_prompt, samples)
        if args.n_gen:
            samples = [bench.generate(args.n_gen, args.n_depth) for _ in range(args.reps)]
            _emit(common, 0, args.n_gen, args.n_depth, args.n_gen, samples)
    finally:
        llama.llama_free(ctx)
        llama.llama_model_free(model)
    return 0


class _Bench:
    """Timed decodes of random tokens, as llama-bench does (content does not change speed)."""

    def __init__(self, llama: Any, model: Any, ctx: Any, n_batch: int) -> None:
        self.llama, self.ctx, self.n_batch = llama, ctx, n_batch
        vocab = llama.llama_model_get_vocab(model)
        self.n_vocab = int(llama.llama_vocab_n_tokens(vocab))
        self.batch = llama.llama_batch_init(n_batch, 0, 1)
        self.random = random.Random(0)

    def clear(self) -> None:
        self.llama.llama_memory_clear(self.llama.llama_get_memory(self.ctx), True)

    def decode_random(self, n_tokens: int, start: int) -> None:
        done = 0
        while done < n_tokens:
            count = min(self.n_batch, n_tokens - done)
            batch = self.batch
            batch.n_tokens = count
            for i in range(count):
                batch.token[i] = self.random.randrange(self.n_vocab)
                batch.pos[i] = start + done + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if i == count - 1 else 0
            if self.llama.llama_decode(self.ctx, batch) != 0:
                raise SystemExit(f"pybench: llama_decode failed at position {start + done}")
            done += count
        self.llama.llama_synchronize(self.ctx)

    def prompt(self, n_prompt: int, n_depth: int) -> int:
        self.clear()
        self.decode_random(n_depth, 0)
        start = time.perf_counter_ns()
        self.decode_random(n_prompt, n_depth)
        return time.perf_counter_ns() - start

    def generate(self, n_gen: int, n_depth: int) -> int:
        self.clear()
        self.decode_random(n_depth, 0)
        start = time.perf_counter_ns()
        for i in range(n_gen):
            self.decode_random(1, n_depth + i)
        return time.perf_counter_ns() - start


def _emit(
    common: dict[str, Any], n_prompt: int, n_gen: int, n_depth: int, tokens: int,
    samples_ns: list[int],
) -> None:
    samples_ts = [tokens * 1e9 / ns for ns in samples_ns]
    record = {
        **common, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth,
        "test_time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "avg_ns": int(statistics.fmean(samples_ns)),
        "stddev_ns": int(statistics.stdev(samples_ns)) if len(samples_ns) > 1 else 0,
        "avg_ts": statistics.fmean(samples_ts),
        "stddev_ts": statistics.stdev(samples_ts) if len(samples_ts) > 1 else 0.0,
        "samples_ns": samples_ns, "samples_ts": samples_ts,
    }
    print(json.dumps(record), flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.engines.pybench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", "-m", type=Path, required=True)
    parser.add_argument("--n-prompt", "-p", type=int, default=512)
    parser.add_argument("--n-gen", "-n", type=int, default=128)
    parser.add_argument("--n-depth", "-d", type=int, default=0)
    parser.add_argument("--n-ctx", "-c", type=int, default=0, help="0: n_prompt+n_gen+n_depth")
    parser.add_argument(flag("threads"), "-t", type=int, default=knobs.default("threads"))
    parser.add_argument(flag("type_k"), default=knobs.default("type_k"))
    parser.add_argument(flag("type_v"), default=knobs.default("type_v"))
    parser.add_argument(flag("flash_attn"), choices=sorted(_FLASH),
                        default=knobs.default("flash_attn"))
    parser.add_argument(flag("load_mode"), choices=LOAD_MODES, default="mmap",
                        help="llama.cpp's load mode (--load-mode of llama-bench)")
    parser.add_argument(flag("n_batch"), type=int, default=knobs.default("n_batch"))
    parser.add_argument(flag("n_ubatch"), type=int, default=knobs.default("n_ubatch"))
    parser.add_argument("--reps", "-r", type=int, default=5)
    parser.add_argument(flag("compute_device"), default=knobs.default("compute_device"),
                        help="the only device to offload to (none: the CPU only)")
    parser.add_argument(flag("n_gpu_layers"), type=int, default=knobs.default("n_gpu_layers"))
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument("--load-only", action="store_true",
                        help="load the model, create the context and exit (with --verbose: "
                             "llama.cpp's own cache and buffer sizes, nothing measured)")
    parser.add_argument("--swa-full", action=argparse.BooleanOptionalAction,
                        default=knobs.default("swa_full"),
                        help="full-size cache for sliding-window layers (llama.cpp's default is "
                             "true; llama-bench's, and this harness's, false)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reps < 1 or args.n_prompt < 0 or args.n_gen < 0 or args.n_depth < 0:
        raise SystemExit("pybench: --reps must be >= 1 and token counts >= 0")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
