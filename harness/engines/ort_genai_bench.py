#!/usr/bin/env python3
"""Time prompt processing and token generation with onnxruntime-genai on token ids.

A standalone script (stdlib, numpy and onnxruntime_genai only): the harness pushes it to a phone
next to a model folder (harness.artifacts.onnx_genai) and runs

    python3 ort_genai_bench.py --model DIR --n-prompt P --n-gen G --threads T --reps R

It prints one JSON line per repetition (flushed), nothing else on stdout. What is measured:

* ``load_ms``: ``og.Config`` + the thread overlay + ``og.Model`` (sessions created, weights
  read), once per process; every line repeats it. Repetitions reuse the loaded model.
* Each repetition makes a fresh ``og.Generator`` (greedy: ``do_sample`` false) and appends
  exactly P prompt ids in one ``append_tokens`` call: ``prefill_ms`` is that call, which runs
  the model over the P tokens (one forward pass) and leaves the logits of the last one.
* The first ``generate_next_token`` after a prefill runs *no* forward pass: it picks the first
  token from the prefill's logits. ``ttft_ms`` is prefill + that pick.
* ``decode_ms`` is the next G ``generate_next_token`` calls, each one forward pass over the
  previous token plus the pick of the next: G forward passes, G new tokens, like llama-bench's
  tgG. ``decode_tps`` = G / decode time; ``prefill_tps`` = P / prefill time.
* ``tokens`` lists every generated id, G + 1 of them: the one from the prefill's logits first,
  then the G decoded ones. ``generated_tokens`` is G (the timed decode steps).

The prompt is fixed-seed pseudo-random ids, as llama-bench's is: the BOS id, then ids drawn
uniformly from the vocabulary minus the BOS/EOS/pad ids (``--seed``), or the ids of
``--prompt-ids FILE`` (a JSON list or whitespace-separated integers). The end-of-sequence id is
suppressed (``min_length``) so every repetition runs all G steps, as llama-bench never stops
early; greedy tokens differ from an unconstrained run only where EOS would have been chosen.

Threads: the model folder pins no count; ``--threads T`` is overlaid on genai_config at load
(``og.Config.overlay`` of ``model.decoder.session_options.intra_op_num_threads``), so the
onnxruntime session runs T intra-op threads (the calling thread and T - 1 workers).
``process_threads`` reports the process's thread count (``/proc/self/status``) after decoding,
which grows by one per thread asked, so the setting can be checked from the output.

Before the timed repetitions one untimed warm-up (a prefill of P ids and one decode step) runs,
as llama-bench does; ``--no-warmup`` skips it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og  # type: ignore[import-untyped]

ENGINE = "onnxruntime-genai"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", required=True, type=Path, help="onnxruntime-genai folder")
    parser.add_argument("--n-prompt", type=int, help="prompt tokens (default: the file's count)")
    parser.add_argument("--n-gen", type=int, required=True, help="decode steps to time")
    parser.add_argument("--threads", type=int, required=True, help="intra-op threads")
    parser.add_argument("--reps", type=int, default=1, help="timed repetitions")
    parser.add_argument("--prompt-ids", type=Path, help="prompt ids (JSON list or whitespace)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompt")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up")
    args = parser.parse_args(argv)
    if args.prompt_ids is None and args.n_prompt is None:
        parser.error("give --n-prompt or --prompt-ids")
    for name in ("n_gen", "threads", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.n_prompt is not None and args.n_prompt < 1:
        parser.error("--n-prompt must be at least 1")
    return args


def read_config(model_dir: Path) -> dict[str, Any]:
    """The folder's genai_config.json (for the vocabulary size and special ids)."""
    with open(model_dir / "genai_config.json", encoding="utf-8") as handle:
        config: dict[str, Any] = json.load(handle)
    return config


def _ids(value: Any) -> set[int]:
    """A config id entry (an int, a list of ints, or absent) as a set."""
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list) else {int(value)}


def random_prompt(config: dict[str, Any], n_prompt: int, seed: int) -> np.ndarray:
    """BOS, then n_prompt - 1 seeded uniform ids from the vocabulary without special ids."""
    model = config["model"]
    special = _ids(model.get("bos_token_id")) | _ids(model.get("eos_token_id")) \
        | _ids(model.get("pad_token_id"))
    pool = np.setdiff1d(np.arange(int(model["vocab_size"])), np.array(sorted(special), int))
    rng = np.random.default_rng(seed)
    ids = rng.choice(pool, size=n_prompt).astype(np.int32)
    bos = model.get("bos_token_id")
    if isinstance(bos, int):
        ids[0] = bos
    return ids


def file_prompt(path: Path) -> np.ndarray:
    """Ids from a JSON list or whitespace/comma-separated integers."""
    text = path.read_text(encoding="utf-8").strip()
    values = json.loads(text) if text.startswith("[") else text.replace(",", " ").split()
    return np.array([int(v) for v in values], dtype=np.int32)


def load_model(model_dir: Path, threads: int) -> tuple[Any, float]:
    """The model with ``threads`` intra-op threads overlaid on its config; load time in ms."""
    start = time.perf_counter()
    config = og.Config(str(model_dir))
    overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}
    config.overlay(json.dumps(overlay))
    model = og.Model(config)
    return model, (time.perf_counter() - start) * 1e3


def process_threads() -> int | None:
    """Threads of this process now (Linux/Android ``/proc``), None where it is not readable."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def generate(model: Any, prompt: np.ndarray, n_gen: int) -> dict[str, Any]:
    """One timed run: prefill, first token from its logits, n_gen decode steps."""
    total = len(prompt) + n_gen + 1  # the prompt, the prefill's token, n_gen decoded tokens
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    generator = og.Generator(model, params)
    clock = time.perf_counter
    start = clock()
    generator.append_tokens(prompt)
    prefilled = clock()
    generator.generate_next_token()  # picks from the prefill's logits; no forward pass
    tokens = [int(generator.get_next_tokens()[0])]
    first = clock()
    for _ in range(n_gen):
        generator.generate_next_token()  # one forward pass over the previous token
        tokens.append(int(generator.get_next_tokens()[0]))
    done = clock()
    prefill_s, decode_s = prefilled - start, done - first
    return {
        "prefill_ms": prefill_s * 1e3,
        "decode_ms": decode_s * 1e3,
        "prefill_tps": len(prompt) / prefill_s,
        "decode_tps": n_gen / decode_s,
        "ttft_ms": (first - start) * 1e3,
        "process_threads": process_threads(),
        "tokens": tokens,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.prompt_ids is not None:
            prompt = file_prompt(args.prompt_ids)
            if args.n_prompt is not None and args.n_prompt != len(prompt):
                raise ValueError(f"--n-prompt {args.n_prompt} but {args.prompt_ids} holds "
                                 f"{len(prompt)} ids")
        else:
            prompt = random_prompt(read_config(args.model), args.n_prompt, args.seed)
        if len(prompt) == 0:
            raise ValueError("the prompt is empty")
        model, load_ms = load_model(args.model, args.threads)
        if not args.no_warmup:
            generate(model, prompt, 1)
        for rep in range(args.reps):
            line = {
                "engine": ENGINE,
                "version": og.__version__,
                "rep": rep,
                "n_threads": args.threads,
                "prompt_tokens": len(prompt),
                "generated_tokens": args.n_gen,
                "load_ms": load_ms,
                **generate(model, prompt, args.n_gen),
            }
            print(json.dumps(line), flush=True)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        print(f"ort_genai_bench: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
