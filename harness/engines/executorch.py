"""The ExecuTorch ``llama_main`` adapter: cell -> argv, PyTorchObserver report -> measurements.

Read from pytorch/executorch at commit cff6f4dd32e630945b7188512c1f2b4f102b05ad:
``examples/models/llama/main.cpp`` (the flags), ``extension/llm/runner/text_llm_runner.cpp``,
``text_token_generator.h`` and ``irunner.h`` (what ``--seq_len`` means, what is counted, where
the clocks are read), ``extension/llm/runner/stats.h`` and its history (the report), ``util.h``
(``time_in_ms``, ``get_rss_bytes``) and ``runtime/platform/default/{posix,android}.cpp`` (where
``ET_LOG`` goes). Older runners were ``examples/models/llama2/runner/runner.cpp`` (the report
lived there until 7a034522c8, 2024-08).

What the tool prints. One generation per launch; at its end ``print_report`` writes one line
``PyTorchObserver {json}`` to stdout (printf) and a human summary through ``ET_LOG``. Keys of
the JSON by generation:

* every version: ``prompt_tokens``, ``generated_tokens``, ``model_load_start_ms``,
  ``model_load_end_ms``, ``inference_start_ms``, ``inference_end_ms``, ``prompt_eval_end_ms``,
  ``first_token_ms``, ``aggregate_sampling_time_ms``, ``SCALING_FACTOR_UNITS_PER_SECOND``
  (1000: the stamps are wall-clock milliseconds, ``time_in_ms``);
* since b9751b1947 (2025-11), only when a CUDA memory tracker filled them: ``gpu_total_bytes``,
  ``gpu_free_{before_load,after_load,after_generate}_bytes``, ``gpu_peak_usage_mb``;
* since ad33804067 (2026-03), first and only when their interval is > 0 ms:
  ``prefill_token_per_sec`` and ``decode_token_per_sec``;
* since 776ba0ccd0 (2026-07): ``model_execution_start_ms``, ``model_execution_end_ms``,
  ``aggregate_model_execution_time_ms``.

How the figures are derived, exactly as ``stats.h`` does (so old and new reports agree):
prompt_tps = prompt_tokens / (prompt_eval_end - inference_start), gen_tps = generated_tokens /
(inference_end - prompt_eval_end), both times SCALING_FACTOR (ms -> s) and absent when the
interval is 0 ms; the printed ``prefill_token_per_sec``/``decode_token_per_sec`` are used where
present. TTFT = first_token - inference_start, load_s = model_load_end - model_load_start. The
runner stamps ``first_token_ms`` and ``prompt_eval_end_ms`` together, right after the prefill
forward returned the token sampled from the prompt's last logits; ``inference_start_ms`` is read
before the prompt is tokenised. So TTFT is the prompt's processing (plus tokenising it) and no
decode step: ``prefill``. The decode interval holds exactly ``generated_tokens`` one-token
forwards.

The summary (``\\tPrompt Tokens: N    Generated Tokens: M``, ``Model Load Time:``, ``Total
inference time:``, ``Prompt evaluation:``, ``Generated M tokens:``, ``Time to first generated
token:``, ``Sampling time over``) goes to stderr with the posix PAL (``I 00:00:01.234567
executorch:stats.h:NN] ...``) but to logcat with the android PAL (the ``android`` CMake preset):
it is read only when stdout holds no complete PyTorchObserver line. Besides the report, stderr
gives ``Resetting threadpool with num threads = K`` (kept as ``n_threads``) and ``RSS after
<stage>: X MiB`` lines (after loading model, after prompt prefill, after finishing text
generation; ``get_rss_bytes`` is getrusage's ru_maxrss, the process's peak so far). The largest
of the launch's lines is its peak (``rss_peak_mib``, used as ``peak_bytes``, else the JSON's
``gpu_peak_usage_mb``): not the first, which a warm-up generation, or an earlier stage, prints
smaller, and not only the end-of-generation line, which a run cut short never prints.

The command line. ``--seq_len`` is the total length: the new runner generates ``min(seq_len,
max_context_len) - n_prompt_tokens`` tokens, the first sampled from the prefill's logits and
the rest by decode steps; ``generated_tokens`` counts the decode steps only (old runners: it
stops at ``pos == seq_len - 1``, the same count). ``seq_len = n_prompt + n_gen + 1`` therefore
runs n_gen decode steps (llama-bench's tg) and reports ``generated_tokens = n_gen``. Greedy
decoding stops at EOS unless ``--ignore_eos`` (since 427f846b7e, 2026-01); the reported
``generated_tokens`` shows an early stop, or a .pte whose max_context_len is too short.

The prompt is ``n`` repetitions of the word "the", space separated: the commonest English word
is one token in every vocabulary llama_main loads (SentencePiece ``▁the``; tiktoken and
byte-level BPE ``the``/`` the``), and those tokenisers never merge across a space, so n words
are n tokens. The runner's ``prompt_tokens`` counts the BOS it adds (none since a922b3dba3,
2024-10, unless ``--num_bos``; before, the .pte's ``get_n_bos``, default 1): ``prompt_bos``
says how many the build adds, and the prompt has ``n_prompt - prompt_bos`` words. The count is
put in ``as_dict`` as ``prompt_tokens``, so a tokenizer that splits otherwise is flagged.

What is baked into the exported .pte and refused at run time: the backend (XNNPACK, Vulkan,
QNN: a matrix crosses its model axis with one .pte per backend), the KV cache dtype, the
context length and prefill chunk (n_ctx, n_batch, n_ubatch are not passed; the workload must
still fit n_ctx), attention and sliding-window layout. The runner maps the .pte with mlock,
errors ignored (``Module::LoadMode::MmapUseMlockIgnoreErrors``), has no thread pinning and no
depth. ``cell.repetitions`` is not read: every launch is one generation, one report, one
Measurement (the harness launches a cell's repetitions one by one).
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness import knobs
from harness.cell import Cell
from harness.engines.base import (
    TTFT_PROMPT,
    EngineOutput,
    Measurement,
    Record,
    as_output,
    common_problem,
    prompt_text,
    require_supported,
)
from harness.errors import EngineError
from harness.units import MIB

UPSTREAM = "pytorch/executorch@cff6f4dd32e630945b7188512c1f2b4f102b05ad"
DEFAULT_SCALE = 1000  # SCALING_FACTOR_UNITS_PER_SECOND: the stamps are milliseconds

_OBSERVER = re.compile(r"PyTorchObserver (\{.*)$")
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_RATE = r"(\S+) \(tokens/second\)"  # %f of a division by 0 ms is inf or nan in old builds
# ET_LOG messages of print_report, after the PAL's "I hh:mm:ss.us executorch:file:line] ".
_SUMMARY: dict[str, re.Pattern[str]] = {
    "tokens": re.compile(r"Prompt Tokens: (\d+)\s+Generated Tokens: (\d+)"),
    "load": re.compile(rf"Model Load Time:\s+{_NUM} \(seconds\)"),
    "total": re.compile(rf"Total inference time:\s+{_NUM} \(seconds\)\s+Rate:\s+{_RATE}"),
    "prompt": re.compile(rf"Prompt evaluation:\s+{_NUM} \(seconds\)\s+Rate:\s+{_RATE}"),
    "gen": re.compile(rf"Generated (\d+) tokens:\s+{_NUM} \(seconds\)\s+Rate:\s+{_RATE}"),
    "ttft": re.compile(rf"Time to first generated token:\s+{_NUM} \(seconds\)"),
    "sampling": re.compile(rf"Sampling time over (\d+) tokens:\s+{_NUM} \(seconds\)"),
    "gpu_peak": re.compile(rf"GPU peak usage: {_NUM} MB"),
}
# A summary block is complete once these have been read (the sampling line may be cut off).
_SUMMARY_NEEDS = ("prompt_tokens", "prompt_evaluation_s", "generated_s",
                  "time_to_first_generated_token_s")
_THREADS = re.compile(r"Resetting threadpool (?:with num threads = |to )(\d+)")
_RSS = re.compile(rf"RSS after [^:\n]+: {_NUM} MiB")

# (prompt_tps, gen_tps, ttft_s, load_s) of one report
Figures = tuple[float | None, float | None, float | None, float | None]


@dataclass(frozen=True)
class ExecutorchRecord:
    """One generation's report: the PyTorchObserver JSON (its own keys), or the stderr summary
    (keys named after its labels, in seconds and tokens/second); plus what stderr said of the
    launch (``n_threads``, ``rss_peak_mib``)."""

    values: dict[str, Any]
    raw: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class ExecutorchLlama:
    """ExecuTorch's ``llama_main`` on one exported ``.pte``.

    ``model_path`` is the .pte; its tokenizer is the file ``tokenizer`` in the same folder, so a
    matrix's model folder must hold it beside the .pte (``tokenizer.model`` for Llama's
    SentencePiece/tiktoken files; ``tokenizer.json`` for a Hugging Face one).

    ``warmup`` runs one untimed generation first (``--warmup``, since 660ef77610, 2024-09), as
    llama-bench warms up; ``ignore_eos`` passes ``--ignore_eos`` (since 427f846b7e, 2026-01).
    gflags rejects a flag a build does not know, so set them False for older builds.
    ``prompt_bos`` is the number of BOS tokens the build's runner puts before the prompt (0
    since a922b3dba3, 2024-10; the .pte's ``get_n_bos``, usually 1, before).
    """

    name: str = "executorch-llama"
    binary_name: str = "llama_main"
    tokenizer: str = "tokenizer.model"
    warmup: bool = True
    ignore_eos: bool = True
    prompt_bos: int = 0
    output_file: str | None = None
    aggregate_only: bool = False  # one report per generation, not a summary over several

    def supports(self, cell: Cell) -> str | None:
        common = common_problem(cell)
        if common:
            return common[1]
        return _baked_problem(cell) or _runtime_problem(cell, self.prompt_bos)

    @property
    def model_files(self) -> tuple[str, ...]:
        """The files the tool reads beside the .pte (checked before anything is pushed)."""
        return (self.tokenizer,)

    def tokenizer_path(self, model_path: str) -> str:
        """The tokenizer beside the .pte, as a path on the device."""
        return posixpath.join(posixpath.dirname(model_path), self.tokenizer)

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        if cpu_mask:
            raise EngineError(f"{self.name} cannot pin its threads (CPU mask {cpu_mask})")
        words = [
            binary_path,
            f"--model_path={model_path}",
            f"--tokenizer_path={self.tokenizer_path(model_path)}",
            f"--prompt={prompt_text(cell.n_prompt - self.prompt_bos)}",
            f"--seq_len={seq_len(cell)}",
            f"--cpu_threads={cell.threads}",
            "--temperature=0",
        ]
        if self.warmup:
            words.append("--warmup")
        if self.ignore_eos:
            words.append("--ignore_eos")
        return words

    def parse(self, output: EngineOutput | str) -> list[Record]:
        return list(parse_output(as_output(output)))

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        return [measurement(rep, record.as_dict()) for rep, record in enumerate(records)]


def seq_len(cell: Cell) -> int:
    """The total length that makes the runner take n_gen decode steps after the prefill."""
    return cell.n_prompt + cell.n_gen + 1


def _baked_problem(cell: Cell) -> str | None:
    """What the exported .pte fixes and a command line cannot change."""
    if cell.compute_device != knobs.CPU_DEVICE:
        return (f"ExecuTorch's backend (XNNPACK, Vulkan, QNN) is baked into the exported .pte, "
                f"so device {cell.compute_device} cannot be chosen at run time: the engine "
                "axis here is the artifact; cross the model axis with one .pte per backend "
                "instead")
    if cell.n_gpu_layers != knobs.default("n_gpu_layers"):
        return (f"n_gpu_layers {knobs.gpu_layers_text(cell.n_gpu_layers)} cannot be asked of "
                "llama_main: what runs on a delegate is baked into the exported .pte; use "
                "one .pte per backend on the model axis")
    if (cell.type_k, cell.type_v) != ("f16", "f16"):
        return (f"the KV cache dtype is baked into the exported .pte, so kv "
                f"{cell.type_k}/{cell.type_v} cannot be chosen at run time; leave kv at "
                "f16/f16 (the .pte's own cache) and export one .pte per cache dtype")
    if cell.swa_full:
        return ("the sliding-window cache layout is baked into the exported .pte; swa_full "
                "cannot be asked of llama_main")
    return None


def _runtime_problem(cell: Cell, prompt_bos: int) -> str | None:
    """What llama_main's runner has no flag for."""
    if cell.sustained_s:
        return ("llama_main runs one generation per launch and prints one report, so a "
                "sustained cell (back-to-back generations in one launch) cannot be run")
    if cell.n_depth:
        return (f"llama_main has no depth (context filled before the test); n_depth is "
                f"{cell.n_depth}")
    if cell.flash_attn != "auto":
        return (f"attention is baked into the exported .pte; flash_attn {cell.flash_attn} "
                "cannot be asked of llama_main (leave it auto)")
    if cell.affinity != "all":
        return f"llama_main cannot pin its threads to CPUs; affinity {cell.affinity} needs 'all'"
    if cell.load_mode or not cell.mmap:
        return (f"llama_main's runner always maps the .pte (mmap, mlock attempted); load mode "
                f"{cell.resolved_load_mode} cannot be asked of it")
    if cell.cache:
        return (f"the {cell.cache} cache knob is not honoured by llama_main: its runner maps "
                "and tries to mlock the .pte and its warmup pages it in before the measured "
                "generation")
    if cell.n_prompt - prompt_bos < 1:
        return (f"llama_main needs a prompt of at least one token besides its {prompt_bos} BOS; "
                f"n_prompt is {cell.n_prompt}")
    return None


def parse_output(output: EngineOutput) -> list[ExecutorchRecord]:
    """The PyTorchObserver reports on stdout, else the stderr summaries; each with what stderr
    said of the launch. Truncated or unreadable reports are dropped."""
    records = observer_records(output.stdout) or summary_records(output.stderr)
    threads = [int(m.group(1)) for m in _THREADS.finditer(output.stderr)]
    rss = [float(m.group(1)) for m in _RSS.finditer(output.stderr)]
    out = []
    for index, record in enumerate(records):
        values = dict(record.values)
        if threads:
            values["n_threads"] = threads[min(index, len(threads) - 1)]
        if rss:
            values["rss_peak_mib"] = max(rss)
        out.append(ExecutorchRecord(values, record.raw))
    return out


def observer_records(stdout: str) -> list[ExecutorchRecord]:
    """Every complete ``PyTorchObserver {json}`` line."""
    out = []
    for line in stdout.splitlines():
        found = _OBSERVER.search(line)
        if not found:
            continue
        try:
            data = json.loads(found.group(1))
        except ValueError:
            continue  # a line cut off by a crash or a full pipe
        if isinstance(data, dict):
            out.append(ExecutorchRecord(data, line.strip()))
    return out


def summary_records(stderr: str) -> list[ExecutorchRecord]:
    """The ``print_report`` summaries on stderr, one per ``Prompt Tokens:`` line."""
    blocks: list[tuple[dict[str, Any], list[str]]] = []
    for line in stderr.splitlines():
        values = _summary_values(line)
        if values is None:
            continue
        if "prompt_tokens" in values:
            blocks.append(({}, []))
        if not blocks:
            continue  # a summary line without its head: the head was lost
        blocks[-1][0].update(values)
        blocks[-1][1].append(line)
    return [ExecutorchRecord(values, "\n".join(lines)) for values, lines in blocks
            if all(key in values for key in _SUMMARY_NEEDS)]


def _summary_values(line: str) -> dict[str, Any] | None:
    """The figures of one summary line, keyed by its label; None for any other line."""
    for kind, pattern in _SUMMARY.items():
        m = pattern.search(line)
        if not m:
            continue
        g = m.groups()
        if kind == "tokens":
            return {"prompt_tokens": int(g[0]), "generated_tokens": int(g[1])}
        if kind == "load":
            return {"model_load_time_s": float(g[0])}
        if kind == "total":
            return {"total_inference_time_s": float(g[0]), "total_rate_tps": _float(g[1])}
        if kind == "prompt":
            return {"prompt_evaluation_s": float(g[0]), "prompt_evaluation_tps": _float(g[1])}
        if kind == "gen":
            return {"generated_s": float(g[1]), "generated_tps": _float(g[2])}
        if kind == "ttft":
            return {"time_to_first_generated_token_s": float(g[0])}
        if kind == "sampling":
            return {"sampling_tokens": int(g[0]), "sampling_time_s": float(g[1])}
        return {"gpu_peak_usage_mb": float(g[0])}
    return None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def measurement(rep: int, data: dict[str, Any]) -> Measurement:
    """One generation's figures from a record's values (either report)."""
    if "inference_start_ms" in data:
        prompt_tps, gen_tps, ttft, load = _observer_figures(data)
    else:
        prompt_tps, gen_tps, ttft, load = _summary_figures(data)
    return Measurement(rep, prompt_tps, gen_tps, ttft, ttft_definition=TTFT_PROMPT,
                       load_s=load, peak_bytes=_peak_bytes(data))


def _observer_figures(data: dict[str, Any]) -> Figures:
    """(prompt_tps, gen_tps, ttft_s, load_s) as stats.h derives them from the stamps."""
    scale = _number(data.get("SCALING_FACTOR_UNITS_PER_SECOND")) or DEFAULT_SCALE
    start = _number(data.get("inference_start_ms"))
    prompt_end = _number(data.get("prompt_eval_end_ms"))
    end = _number(data.get("inference_end_ms"))
    prompt_tps = _number(data.get("prefill_token_per_sec"))
    if prompt_tps is None:
        prompt_tps = _rate(data.get("prompt_tokens"), start, prompt_end, scale)
    gen_tps = _number(data.get("decode_token_per_sec"))
    if gen_tps is None:
        gen_tps = _rate(data.get("generated_tokens"), prompt_end, end, scale)
    ttft = _interval(start, _number(data.get("first_token_ms")), scale)
    load = _interval(_number(data.get("model_load_start_ms")),
                     _number(data.get("model_load_end_ms")), scale)
    return prompt_tps, gen_tps, ttft, load


def _summary_figures(data: dict[str, Any]) -> Figures:
    """(prompt_tps, gen_tps, ttft_s, load_s) from the summary; a rate over 0 s is none."""
    prompt_tps = data.get("prompt_evaluation_tps") if data.get("prompt_evaluation_s") else None
    gen_tps = data.get("generated_tps") if data.get("generated_s") else None
    ttft = data.get("time_to_first_generated_token_s")
    load = data.get("model_load_time_s")
    return (prompt_tps, gen_tps, ttft if ttft is not None and ttft >= 0 else None,
            load if load is not None and load >= 0 else None)


def _peak_bytes(data: dict[str, Any]) -> int | None:
    """The process's peak RSS the runner logged (stores from before ``rss_peak_mib`` kept
    the end-of-generation line), else the CUDA tracker's peak."""
    for key in ("rss_peak_mib", "rss_after_generation_mib", "gpu_peak_usage_mb"):
        mib = _number(data.get(key))
        if mib is not None and mib > 0:
            return round(mib * MIB)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _interval(start: float | None, end: float | None, scale: float) -> float | None:
    """Seconds between two stamps; None when one was never taken (0) or they run backwards."""
    if not start or not end or end < start:
        return None
    return (end - start) / scale


def _rate(tokens: Any, start: float | None, end: float | None, scale: float) -> float | None:
    """Tokens per second over a stamp interval; None over 0 ms, as stats.h leaves it out."""
    count = _number(tokens)
    if count is None or not start or not end or end <= start:
        return None
    return count / (end - start) * scale
