"""The MNN ``llm_bench`` adapter: cell -> argv, the markdown table it prints -> one aggregate.

Read from alibaba/MNN ``transformers/llm/engine/tools/llm_bench.cpp`` at 58eb6aa47c05 (2026-08-06,
the file's last change in the snapshot whose head is 4d40bdbd7efb), and at 00d5473cee35
(2026-02-11) for what older builds do. What the tool is:

**Command line.** ``-m DIR/config.json`` (the model folder's config; a positional path is an
"invalid parameter" and the tool exits -1; the path needs a ``/``, the folder's name is the
table's ``model``), ``-a cpu|metal|cuda|opencl|hexagon`` (any other name, ``vulkan`` included,
silently becomes the CPU), ``-t`` threads (on OpenCL not threads: ``Llm::initRuntime`` in
``transformers/llm/engine/src/llm.cpp``, bc85588f29e4, ORs 64|512 into it, and
``OpenCLBackend::setGpuMode`` in ``source/backend/opencl/core/OpenCLBackend.cpp`` reads its low
bits 1/2/4/8/16 as the tuning level none/heavy/wide/normal/fast), ``-c`` precision (0
normal, 1 high, 2 low, the default; printed Normal/High/Low),
``-p``/``-n`` (defaults 512 and 128 whenever not given, so both are always passed),
``-pg P,G``, ``-rep`` (default 5; only its first value counts), ``-mmp 0|1`` (read as a C++
bool: digits only), ``-load true|false`` (default false, whatever ``--help`` says),
``-fa 0|1`` (default 1; from daae35c04, 2026-07-22), ``-qa`` (KV quantisation, default 0),
``-dyo``, ``-kv true|false`` (deprecated, default false), ``-fp``, ``-j``, ``--profile``. There is
no depth, batch, context-size, CPU-mask or layer-offload option.

**Repetitions.** Every test runs ``-rep + 1`` times and drops the first run (a warm-up), so
``-rep R`` is R timed runs. Each row prints the mean of the runs' rates (tokens / that run's
time, per run) and their sample standard deviation, ``sqrt(sum x^2/(n-1) - mean^2 n/(n-1))``
(n-1 in the denominator, 0 for one run; the naive formula can print ``nan`` for near-equal runs).
``-load true`` times three model loads (all three kept, whatever ``-rep`` says) and adds a
``loadingTime(s)`` column ``"%.2f ± %.2f"`` over those three; each test row loads the model anew.

**Modes.** Without ``-kv true``: ``-p P`` is a row ``test = ppP`` (a prefill of P tokens from an
empty cache, rate P / prefill time), ``-n G`` a row ``tgG`` (G decode steps after a one-token
prompt whose prefill is not counted, rate G / decode time; llama-bench's ``tg`` at depth 0), both
in a ``t/s`` column ``"%.2f ± %.2f"``. A decode step's time is detokenising plus the forward
pass, not the sampling; a model that samples an end token early has fewer steps timed, yet the
``tg`` rate still divides G (only the ``-pg`` row counts the tokens generated). The table prints
no token count, so the records carry no ``prompt_tokens``/``generated_tokens``: the label's P and
G are what was asked, and reporting them as counts would let the trial's engine-report check
pass by construction. ``-p 0``
makes no row; ``-n 0`` makes none from 5bc51d0b4 (2026-07-30) on, and before that a ``pp0+tg0``
row of ``nan`` (dropped here). ``-pg P,G`` is a ``ppP+tgG`` row: from 5bc51d0b4 one run whose
decode continues from the prompt's cache, in a ``speed(tok/s)`` column
``"%.2f ± %.2f<br>%.2f ± %.2f"`` (prefill, then decode; the table's other rows keep one value
there); before, one combined rate (P+G) / (prefill + decode) that cannot be split. ``-kv true``
(the llm_demo layout) pairs every -p with every -n into rows ``llm_demo = prompt=%d<br>decode=%d``
with that ``speed(tok/s)`` cell, and skips 0 on either side.

This adapter runs ``-p P -n G``: one launch gives the prefill and the decode rate, each with the
meaning llama-bench's ``pp``/``tg`` tests have in the store (decode from an empty context, not
after the prompt as ``-pg``/``-kv true`` decode), on every version. n_prompt 0 or n_gen 0 is
allowed (that row is simply absent); both 0 measure nothing.

**n.** The table never prints how many runs a mean is over. ``aggregate_n`` is the ``-rep`` the
caller who built the argv passes to ``parse`` (``repetitions=``); without it, None. The harness's
burst trials launch ``-rep 1`` (one timed run after MNN's own warm-up, sd printed 0.00).

**Columns.** ``model | modelSize | backend | threads | precision``, then ``memory`` and
``dynamicOption`` (only for several values), ``divisionRatioSme2Neon``, ``quantKv`` (older:
``quantAttention``), ``flashAttention`` (only when -fa is not 1), ``smeCoreNum``, ``mmap`` (only
with -mmp 1), then ``test | t/s`` (or ``speed(tok/s)``, or ``llm_demo | speed(tok/s)``), then
``loadingTime(s)``. ``modelSize`` is the weight file alone (``llm.mnn.weight`` or the config's
``llm_weight``) in ``%.2f MiB`` below 1 GiB, else ``%.2f GiB``. ``memory`` is MNN's memory
*policy* (Low/Normal/High); the tool prints no memory figure, so ``peak_bytes`` stays None.

**Output streams.** The table goes to stdout (``fprintf``, ``-fp`` unused); MNN's own log
(``MNN_PRINT``/``MNN_ERROR``, e.g. the tokenizer's ``cost time`` lines) is ``printf`` to stdout on
Linux and on Android builds with ``MNN_USE_LOGCAT`` off (project/android/build_64.sh), logcat with
CMake's default (on) for Android. Argument errors and the -kv deprecation go to stderr. The header
is printed after the first test finishes, and log lines may fall between rows: the parser reads
any line framed by ``|`` after a header and its separator row, and nothing else. stdout is
block-buffered into a pipe, so a killed tool loses its unflushed rows, and a row cut by a flush
boundary is dropped.

**What a cell maps to.** threads -> -t on the CPU; on OpenCL -t is the adapter's
``opencl_tuning`` (wide, 4, MNN's default) and a cell's threads must be 4 (a threads axis there
would sweep tuning levels under the name of threads; the table's threads column, the -t value,
is not read as a thread count), n_prompt/n_gen -> -p/-n, repetitions -> -rep, mmap ->
-mmp (MNN's mmap puts its rearranged weights in files under ``./tmp`` in the launch's folder and
maps those, not the model file as llama.cpp does), flash_attn -> -fa (auto: 1, MNN's default),
device -> -a (none: cpu, an OpenCL device: opencl), precision -> -c from the adapter (2, MNN's
default), ``-load true`` unless ``load_time`` is off. n_batch/n_ubatch are not passed: MNN
prefills the prompt in one forward unless the model's config.json sets ``chunk``. MNN also sets
its dynamic quantisation option itself: ``-dyo`` % 8 for prompts of 1..300 tokens, + 8 otherwise
(so the tg row always runs with 8).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from harness import knobs
from harness.cell import Cell
from harness.engines.base import (
    TTFT_PROMPT,
    EngineOutput,
    Measurement,
    Record,
    affinity_mask,
    as_output,
    common_problem,
    device_family,
    require_supported,
    sustained_problem,
)
from harness.errors import EngineError

NAME = "mnn-llm-bench"
BINARY = "llm_bench"
MNN_KV = "f16"  # the one KV type a cell may ask: MNN's unquantised cache (-qa 0)
DEFAULT_PRECISION = 2  # -c 2, "low": fp16 where the backend computes in it (MNN's default)
PRECISION_NAMES = {0: "Normal", 1: "High", 2: "Low"}  # as the table prints -c
# MNN's OpenCL tuning levels (include/MNN/MNNForwardType.h, MNNGpuMode's low bits): what -t is
# on -a opencl, where llm.cpp ORs 64|512 (buffer memory, batch recording) into the -t value
OPENCL_TUNING = {"none": 1, "heavy": 2, "wide": 4, "normal": 8, "fast": 16}
DEFAULT_OPENCL_TUNING = "wide"  # MNN's documented default level
OPENCL_THREADS = 4  # the one threads value an OpenCL cell may carry (the matrix's default)
OPENCL_BACKEND = "OPENCL"  # the table's backend column for -a opencl
LOAD_RUNS = 3  # -load true times this many loads, whatever -rep says

_NUMBER = r"([-+]?(?:nan|inf|\d+(?:\.\d*)?))"
_PAIR = re.compile(rf"^{_NUMBER}\s*±\s*{_NUMBER}$", re.IGNORECASE)
_TWO_PAIRS = re.compile(rf"^{_NUMBER}\s*±\s*{_NUMBER}\s*<br>\s*{_NUMBER}\s*±\s*{_NUMBER}$",
                        re.IGNORECASE)
_TEST = re.compile(r"^(?:pp(\d+)|tg(\d+)|pp(\d+)\+tg(\d+))$")
_DEMO = re.compile(r"^prompt=(\d+)<br>decode=(\d+)$")
_SIZE = re.compile(r"^(\d+(?:\.\d*)?) (MiB|GiB)$")
_SEPARATOR = re.compile(r"^:?-+:?$")
_UNITS = {"MiB": 1024**2, "GiB": 1024**3}
TEST_COLUMNS = ("test", "llm_demo")
SPEED_COLUMNS = ("t/s", "speed(tok/s)")
LOAD_COLUMN = "loadingTime(s)"


@dataclass(frozen=True)
class MnnDialect:
    """Command-line differences between llm_bench versions."""

    flash_attn: bool = True  # -fa 0|1 exists (MNN daae35c04, 2026-07-22, and later)


def dialect_from_help(text: str) -> MnnDialect:
    """Read the dialect from ``llm_bench -h`` output."""
    return MnnDialect(flash_attn="--flash-attention" in text)


@dataclass(frozen=True)
class MnnRecord:
    """One row of llm_bench's table; figures are its mean ± sd over the launch's -rep runs."""

    test: str  # as printed: pp512, tg128, pp512+tg128, or llm_demo's prompt=512<br>decode=128
    n_prompt: int
    n_gen: int
    shared_kv: bool  # prefill and decode in one run, decode continuing from the prompt's cache
    tps: float | None = None  # one-rate rows: pp (prefill), tg (decode), an old pp+tg (combined)
    tps_sd: float | None = None
    prefill_tps: float | None = None  # shared_kv rows: the ``<br>`` cell's two rates
    prefill_tps_sd: float | None = None
    decode_tps: float | None = None
    decode_tps_sd: float | None = None
    load_s: float | None = None  # loadingTime(s): the mean of LOAD_RUNS loads, not of -rep
    load_s_sd: float | None = None
    model: str | None = None  # the model folder's name
    model_size_bytes: int | None = None  # the weight file, from the printed MiB/GiB (2 decimals)
    backend: str | None = None  # CPU, OPENCL, METAL, CUDA, HEXAGON
    n_threads: int | None = None
    precision: str | None = None  # Low, Normal, High
    memory_mode: str | None = None  # MNN's memory policy (only for several --memory values)
    mmap: bool | None = None  # printed only with -mmp 1
    flash_attn: str | None = None  # on/off, printed only when -fa is not 1
    repetitions: int | None = None  # the launch's -rep, where the caller said (the table does not)
    columns: dict[str, str] = field(default_factory=dict)  # every cell as printed, by header
    raw: str = ""  # the row as printed

    @property
    def kind(self) -> str:
        """``pp`` (prompt only), ``tg`` (generation only) or ``pg`` (both)."""
        if self.n_prompt and self.n_gen:
            return "pg"
        return "pp" if self.n_prompt else "tg"

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "raw"}
        data["columns"] = dict(self.columns)
        data["kind"] = self.kind
        # no prompt_tokens/generated_tokens: the row's label is the -p/-n asked, not a count of
        # tokens run (llm_bench prints none), so the trial's engine-report check has nothing of
        # the tool's own to compare; an early end token goes unseen (see the module's note)
        return data


_KNOWN = tuple(f.name for f in fields(MnnRecord) if f.name != "raw")


def record_from_dict(data: dict[str, Any], raw: str = "") -> MnnRecord:
    """An MnnRecord again from its ``as_dict`` (the store keeps records as JSON)."""
    known = {key: data[key] for key in _KNOWN if key in data}
    known["columns"] = dict(known.get("columns") or {})
    return MnnRecord(**known, raw=raw)


def _cells(line: str) -> list[str] | None:
    """A markdown table line's cells; None when the line is not one framed by ``|`` (log text,
    or a row cut before its last ``|``)."""
    if len(line) < 2 or not line.startswith("|") or not line.endswith("|"):
        return None
    return [cell.strip() for cell in line[1:-1].split("|")]


def _is_separator(cells: Sequence[str]) -> bool:
    return all(_SEPARATOR.match(cell) for cell in cells)


def _is_bench_header(cells: Sequence[str]) -> bool:
    return (any(c in TEST_COLUMNS for c in cells) and any(c in SPEED_COLUMNS for c in cells)
            and not _is_separator(cells))


def _number(text: str) -> float | None:
    value = float(text)
    return None if math.isnan(value) or math.isinf(value) else value


def _rate(text: str) -> float | None:
    """A mean rate; 0.00 (llm_bench's figure for a run it could not time) reads as None."""
    value = _number(text)
    return value if value is not None and value > 0 else None


def _pair(text: str | None) -> tuple[float | None, float | None] | None:
    match = _PAIR.match(text or "")
    if not match:
        return None
    return _rate(match.group(1)), _number(match.group(2))


def _model_size(text: str | None) -> int | None:
    match = _SIZE.match(text or "")
    return round(float(match.group(1)) * _UNITS[match.group(2)]) if match else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _record(header: Sequence[str], cells: Sequence[str], raw: str,
            repetitions: int | None) -> MnnRecord | None:
    """One data row, or None when it is not one llm_bench prints (or measures nothing)."""
    values = dict(zip(header, cells, strict=True))
    speed = next((values[c] for c in SPEED_COLUMNS if c in values), "")
    if "llm_demo" in values:
        label = values["llm_demo"]
        demo = _DEMO.match(label)
        if not demo:
            return None
        n_prompt, n_gen = int(demo.group(1)), int(demo.group(2))
    else:
        label = values.get("test", "")
        test = _TEST.match(label)
        if not test:
            return None
        pp, tg, pg_p, pg_g = test.groups()
        n_prompt = int(pp or pg_p or 0)
        n_gen = int(tg or pg_g or 0)
    if not n_prompt and not n_gen:
        return None  # an old build's -n 0 row (pp0+tg0, nan): no test ran
    two = _TWO_PAIRS.match(speed)
    one = _PAIR.match(speed)
    rates: dict[str, Any]
    if two and n_prompt and n_gen:
        rates = {"shared_kv": True,
                 "prefill_tps": _rate(two.group(1)), "prefill_tps_sd": _number(two.group(2)),
                 "decode_tps": _rate(two.group(3)), "decode_tps_sd": _number(two.group(4))}
    elif one and "llm_demo" not in values:
        rates = {"shared_kv": False, "tps": _rate(one.group(1)), "tps_sd": _number(one.group(2))}
    else:
        return None
    load = _pair(values.get(LOAD_COLUMN))
    mmap = values.get("mmap")
    return MnnRecord(
        test=label, n_prompt=n_prompt, n_gen=n_gen, **rates,
        load_s=load[0] if load else None, load_s_sd=load[1] if load else None,
        model=values.get("model") or None, model_size_bytes=_model_size(values.get("modelSize")),
        backend=values.get("backend") or None,
        # on OpenCL the column is the -t value, a tuning level, not a thread count
        n_threads=None if values.get("backend") == OPENCL_BACKEND else _int(values.get("threads")),
        precision=values.get("precision") or None, memory_mode=values.get("memory") or None,
        mmap=None if mmap is None else mmap == "true",
        flash_attn=values.get("flashAttention") or None,
        repetitions=repetitions, columns=dict(values), raw=raw,
    )


def parse_output(text: str, repetitions: int | None = None) -> list[MnnRecord]:
    """One record per complete data row of llm_bench's markdown table(s) in ``text``.

    A table starts at a header row (with a test and a speed column) followed by its separator
    row; data rows are the later lines framed by ``|`` with as many cells as the header, log
    lines between them skipped. A row cut off (no closing ``|``, or fewer cells) is dropped;
    text without a table gives []. ``repetitions`` is the launch's ``-rep``, which the table
    does not print: the caller who built the argv knows it.
    """
    lines = [line.strip() for line in text.splitlines()]
    records: list[MnnRecord] = []
    header: list[str] | None = None
    for index, line in enumerate(lines):
        cells = _cells(line)
        if cells is None:
            continue
        following = _cells(lines[index + 1]) if index + 1 < len(lines) else None
        if (following is not None and len(following) == len(cells) and _is_separator(following)
                and _is_bench_header(cells)):
            header = cells
            continue
        if header is None or len(cells) != len(header) or _is_separator(cells):
            continue
        record = _record(header, cells, line, repetitions)
        if record is not None:
            records.append(record)
    return records


def measure_records(records: Sequence[MnnRecord]) -> list[Measurement]:
    """One aggregate Measurement from the table's rows, or [] when no row has a rate.

    The prefill rate comes from the ``pp`` row and the decode rate from the ``tg`` row (what
    this adapter's argv asks); only when the output has neither does a shared-KV row (``-pg``
    from 5bc51d0b4, ``-kv true``) give both, its decode then continuing after the prompt. An old
    ``pp+tg`` row's combined rate is never split.

    - ``aggregate_n``: the ``-rep`` the records carry (given to ``parse_output`` by whoever
      built the argv); None when nobody said, as llm_bench's table does not.
    - ``ttft_s``: n_prompt / the mean prefill rate, a derived figure (llm_bench prints no
      time): the harmonic mean of the runs' prefill times, so at most their arithmetic mean.
      Its definition is ``prefill`` (the time to process the n_prompt tokens, as llama.cpp's).
    - ``load_s``: the first row's ``loadingTime(s)`` mean (its LOAD_RUNS loads, the launch's
      first; the first of them may read a cold model, the others a warm one); None without
      ``-load true``.
    - ``peak_bytes``: None, llm_bench prints no memory figure.
    """
    prefill = next((r for r in records if r.kind == "pp" and r.tps is not None), None)
    decode = next((r for r in records if r.kind == "tg" and r.tps is not None), None)
    prompt_tps = prompt_sd = gen_tps = gen_sd = None
    n_prompt = 0
    if prefill is not None or decode is not None:
        if prefill is not None:
            prompt_tps, prompt_sd, n_prompt = prefill.tps, prefill.tps_sd, prefill.n_prompt
        if decode is not None:
            gen_tps, gen_sd = decode.tps, decode.tps_sd
    else:
        shared = next((r for r in records if r.shared_kv
                       and (r.prefill_tps is not None or r.decode_tps is not None)), None)
        if shared is None:
            return []
        prompt_tps, prompt_sd, n_prompt = shared.prefill_tps, shared.prefill_tps_sd, \
            shared.n_prompt
        gen_tps, gen_sd = shared.decode_tps, shared.decode_tps_sd
    ttft = n_prompt / prompt_tps if prompt_tps and n_prompt else None
    n = next((r.repetitions for r in records if r.repetitions is not None), None)
    load = next((r.load_s for r in records if r.load_s is not None), None)
    return [Measurement(
        rep=0, prompt_tps=prompt_tps, gen_tps=gen_tps, ttft_s=ttft, aggregate_n=n,
        prompt_tps_sd=prompt_sd if prompt_tps is not None else None,
        gen_tps_sd=gen_sd if gen_tps is not None else None,
        ttft_definition=TTFT_PROMPT if ttft is not None else None, load_s=load, peak_bytes=None,
    )]


def backend_for(compute_device: str) -> tuple[str | None, str | None]:
    """(llm_bench's ``-a`` name, None) for a device knob value, or (None, why it cannot)."""
    family = device_family(compute_device)
    name = compute_device.lower()
    if family == "cpu":
        return "cpu", None
    if "vulkan" in name:
        return None, (f"llm_bench's -a knows cpu, metal, cuda, opencl and hexagon and runs any "
                      f"other name, vulkan included, on the CPU, so device {compute_device} "
                      f"cannot be asked of {NAME}")
    if family == "gpu" and "opencl" in name:
        return "opencl", None
    return None, (f"{NAME} runs device none on -a cpu and an OpenCL device on -a opencl; "
                  f"device {compute_device} ({family or 'an unknown kind'}) is neither")


@dataclass(frozen=True)
class MnnLlmBench:
    """The MNN llm_bench adapter (``Engine`` protocol); ``model_path`` is the device path of
    the model folder's ``config.json``."""

    dialect: MnnDialect = MnnDialect()
    name: str = NAME
    precision: int = DEFAULT_PRECISION  # -c: 0 normal, 1 high, 2 low
    opencl_tuning: str = DEFAULT_OPENCL_TUNING  # -t on -a opencl: a key of OPENCL_TUNING
    load_time: bool = True  # -load true: the loadingTime(s) column (three loads per test)

    binary_name: ClassVar[str] = BINARY
    aggregate_only: ClassVar[bool] = True  # the table has mean ± sd only, never a run's figure

    def __post_init__(self) -> None:
        if self.opencl_tuning not in OPENCL_TUNING:
            raise EngineError(f"opencl_tuning {self.opencl_tuning!r} is not an MNN tuning level; "
                              f"use one of {', '.join(OPENCL_TUNING)}")

    def supports(self, cell: Cell) -> str | None:
        sustained = sustained_problem(self.name, cell)
        if sustained:
            return sustained
        if cell.type_k != MNN_KV or cell.type_v != MNN_KV:
            return (f"{self.name} runs its KV cache unquantised at -qa 0 (in the backend's "
                    "compute precision: fp16 at precision low where the backend computes in "
                    "fp16, else fp32); its own int8/TQ3/TQ4 modes (-qa 1..6) are not llama.cpp's "
                    f"types, so kv {cell.type_k}/{cell.type_v} cannot be asked (use {MNN_KV})")
        common = common_problem(cell)
        if common:
            return common[1]
        if not cell.n_prompt and not cell.n_gen:
            return (f"n_prompt 0 and n_gen 0 measure nothing ({self.name} makes no test of "
                    "-p 0 or -n 0)")
        if cell.repetitions < 1:
            return (f"llm_bench -rep {cell.repetitions} times nothing (its first run is a "
                    "warm-up it discards); use repetitions >= 1")
        if cell.n_depth:
            return (f"llm_bench has no depth option (its prompt test starts from an empty "
                    f"cache, its generation test from a one-token context), so n_depth "
                    f"{cell.n_depth} cannot be measured with {self.name}")
        if cell.affinity != "all":
            return (f"llm_bench has no CPU mask option (MNN picks its cores itself), so "
                    f"affinity {cell.affinity!r} cannot be asked of {self.name}; use 'all'")
        if cell.swa_full:
            return (f"llm_bench has no option for a full-size sliding-window cache, so swa_full "
                    f"true cannot be asked of {self.name}")
        if cell.load_mode:
            return (f"{self.name} has only -mmp 0|1 (mmap true or false), so load_mode "
                    f"{cell.load_mode} cannot be asked of it")
        if cell.cache:
            return (f"{self.name} is given the model folder's config.json, not its weights: the "
                    "harness evicts or warms the model file it passes, so this engine cannot "
                    "honour a cache knob")
        return self._device_problem(cell)

    def _device_problem(self, cell: Cell) -> str | None:
        backend, reason = backend_for(cell.compute_device)
        if reason:
            return reason
        if backend == "cpu":
            offload = knobs.offload_problem(cell.compute_device, cell.n_gpu_layers)
            if offload:
                return offload
        elif cell.n_gpu_layers != knobs.ALL_LAYERS:
            return (f"MNN runs the whole model on the backend -a names (no partial offload), so "
                    f"n_gpu_layers {knobs.gpu_layers_text(cell.n_gpu_layers)} on "
                    f"{cell.compute_device} cannot be asked of {self.name}; use all")
        if cell.flash_attn != "auto" and not self.dialect.flash_attn:
            return (f"this llm_bench has no -fa (MNN before daae35c04), so flash_attn "
                    f"{cell.flash_attn} cannot be asked; use auto (the build's own attention)")
        if backend == "opencl" and cell.threads != OPENCL_THREADS:
            return (f"on MNN's OpenCL backend -t is not a thread count: llm.cpp ORs 64|512 into "
                    f"it and the backend reads its low bits as the tuning level (1 none, 2 "
                    f"heavy, 4 wide, 8 normal, 16 fast), so a threads axis would sweep tuning "
                    f"levels; {self.name} passes -t for its own opencl_tuning "
                    f"({self.opencl_tuning}) and takes threads {OPENCL_THREADS} only on "
                    f"{cell.compute_device}, not {cell.threads}")
        if cell.flash_attn != "auto" and backend == "opencl":
            return (f"MNN's OpenCL backend ignores -fa (only its CPU and Metal attention read "
                    f"the attention mode), so flash_attn {cell.flash_attn} cannot be asked on "
                    f"{cell.compute_device}; use auto")
        return None

    def argv(
        self, cell: Cell, binary_path: str, model_path: str, cpu_mask: str | None = None
    ) -> list[str]:
        require_supported(self, cell)
        if affinity_mask(cell, cpu_mask):
            raise EngineError(f"cell {cell.label()}: llm_bench cannot pin threads (no CPU mask)")
        if not model_path.endswith(".json") or "/" not in model_path:
            raise EngineError(f"llm_bench -m takes the path of the model folder's config.json "
                              f"(with its folder), not {model_path!r}")
        backend, _ = backend_for(cell.compute_device)
        threads = OPENCL_TUNING[self.opencl_tuning] if backend == "opencl" else cell.threads
        argv = [binary_path, "-m", model_path, "-a", str(backend), "-t", str(threads),
                "-c", str(self.precision), "-p", str(cell.n_prompt), "-n", str(cell.n_gen),
                "-rep", str(cell.repetitions), "-mmp", "1" if cell.mmap else "0"]
        if self.dialect.flash_attn:
            argv += ["-fa", "0" if cell.flash_attn == "off" else "1"]
        if self.load_time:
            argv += ["-load", "true"]
        return argv

    def parse(self, output: EngineOutput | str, repetitions: int | None = None) -> list[Record]:
        """The table's rows from stdout; ``repetitions``: the launch's -rep, where known."""
        return list(parse_output(as_output(output).stdout, repetitions))

    def measure(self, records: Sequence[Record]) -> list[Measurement]:
        rows = [r if isinstance(r, MnnRecord) else record_from_dict(r.as_dict(), r.raw)
                for r in records]
        return measure_records(rows)
