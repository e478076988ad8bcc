"""The MNN llm_bench adapter: argv from a cell, its markdown table (every layout, cut short,
absent), one aggregate measurement, and the cells it refuses.

Outputs are composed here the way llm_bench prints them (transformers/llm/engine/tools/
llm_bench.cpp, MNN 58eb6aa47c05): ``" %*s |"`` per cell with its field width (printf pads by
bytes, so ``±`` takes two), rates as ``"%.2f ± %.2f"``, the shared-KV cell as
``"%.2f ± %.2f<br>%.2f ± %.2f"``, sizes as ``"%.2f MiB"``/``"%.2f GiB"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from harness.cell import Cell
from harness.engines.base import (
    ENGINE_UNSUPPORTED,
    EXCEEDS_CTX,
    TTFT_PROMPT,
    EngineOutput,
    Record,
    support_problem,
)
from harness.engines.mnn import (
    MnnDialect,
    MnnLlmBench,
    dialect_from_help,
    measure_records,
    parse_output,
)
from harness.errors import EngineError

DATA = Path(__file__).parent / "data"
BIN = "/data/local/tmp/harness/builds/mnn/bin/llm_bench"
CONFIG = "/data/local/tmp/harness/models/qwen2.5-0.5b-mnn/config.json"

CELL = Cell(
    build="mnn-3.6", model="qwen2.5-0.5b", quant="Q4_K_M", n_ctx=512, type_k="f16",
    type_v="f16", threads=4, affinity="all", flash_attn="auto", mmap=False, n_batch=512,
    n_ubatch=256, n_prompt=64, n_gen=32, repetitions=3, engine="mnn-llm-bench",
)
OPENCL = dataclasses.replace(CELL, compute_device="GPUOpenCL", n_gpu_layers=-1, mmap=True)

# -- the table, as markdownPrinter prints it ----------------------------------------------------

_FLOAT_FIELDS = ("t/s", "modelSize", "prefill&decode speed (tok/s)")


def _width(field: str) -> int:
    """markdownPrinter::getFieldWidth: negative is left-aligned."""
    fixed = {"model": -30, "prefill&decode speed (tok/s)": 20, "threads": 5, "useMmap": 4,
             "test": -13}
    if field in fixed:
        return fixed[field]
    width = max(len(field), 10)
    return width if field in _FLOAT_FIELDS else -width


def _pad(text: str, width: int) -> str:
    """printf's ``%*s``: pads to |width| bytes, on the right for a negative width."""
    room = " " * max(abs(width) - len(text.encode()), 0)
    return text + room if width < 0 else room + text


def _header(fields: Sequence[str]) -> str:
    names = ["mmap" if f == "useMmap" else f for f in fields]
    top = "|" + "".join(f" {_pad(n, _width(f))} |" for f, n in zip(fields, names, strict=True))
    rule = "|" + "".join(
        f" {'-' * (abs(_width(f)) - 1)}{':' if _width(f) > 0 else '-'} |" for f in fields)
    return f"{top}\n{rule}\n"


def _row(fields: Sequence[str], values: Mapping[str, str]) -> str:
    cells = []
    for f in fields:
        width = _width(f) + (1 if f in ("prefill&decode speed (tok/s)", "t/s") else 0)
        cells.append(f" {_pad(values[f], width)} |")
    return "|" + "".join(cells) + "\n"


def _pm(mean: float, sd: float) -> str:
    return "%.2f ± %.2f" % (mean, sd)  # noqa: UP031 (llm_bench's own format string)


def _two(prefill: float, prefill_sd: float, decode: float, decode_sd: float) -> str:
    return "%.2f ± %.2f<br>%.2f ± %.2f" % (prefill, prefill_sd, decode, decode_sd)  # noqa: UP031


def _size(nbytes: int) -> str:
    if nbytes < 1024**3:
        return "%.2f MiB" % (nbytes / 1024.0 / 1024.0)
    return "%.2f GiB" % (nbytes / 1024.0 / 1024.0 / 1024.0)


WEIGHTS = 373_293_056  # 356.00 MiB
BASE = {"model": "qwen2.5-0.5b-mnn", "modelSize": _size(WEIGHTS), "backend": "CPU",
        "threads": "4", "precision": "Low"}
DEFAULT_FIELDS = ["model", "modelSize", "backend", "threads", "precision"]
LOG = "load, 263, cost time: 12.345000 ms\n"  # an AutoTime line (MNN_PRINT: printf to stdout)


def _table(fields: Sequence[str], rows: Sequence[Mapping[str, str]], *, between: str = "") -> str:
    """A launch's stdout: MNN's log, the header after the first test, rows (log between)."""
    out = LOG + _header(fields) + _row(fields, {**BASE, **rows[0]})
    for row in rows[1:]:
        out += between + _row(fields, {**BASE, **row})
    return out + "\n"  # llm_bench ends with fprintf(stdout, "\n")


PP_TG_FIELDS = [*DEFAULT_FIELDS, "test", "t/s", "loadingTime(s)"]
PP_TG = _table(PP_TG_FIELDS, [
    {"test": "pp64", "t/s": _pm(812.345, 5.671), "loadingTime(s)": _pm(1.234, 0.456)},
    {"test": "tg32", "t/s": _pm(41.2, 0.3), "loadingTime(s)": _pm(0.9, 0.05)},
], between=LOG)

# -- argv ---------------------------------------------------------------------------------------


def test_argv_for_a_cpu_cell() -> None:
    assert MnnLlmBench().argv(CELL, BIN, CONFIG) == [
        BIN, "-m", CONFIG, "-a", "cpu", "-t", "4", "-c", "2", "-p", "64", "-n", "32",
        "-rep", "3", "-mmp", "0", "-fa", "1", "-load", "true",
    ]


@pytest.mark.parametrize("device", ["GPUOpenCL", "OpenCL0"])
def test_argv_for_an_opencl_cell(device: str) -> None:
    cell = dataclasses.replace(OPENCL, compute_device=device)
    assert MnnLlmBench().argv(cell, BIN, CONFIG) == [
        BIN, "-m", CONFIG, "-a", "opencl", "-t", "4", "-c", "2", "-p", "64", "-n", "32",
        "-rep", "3", "-mmp", "1", "-fa", "1", "-load", "true",
    ]


def test_argv_flash_attention_precision_load_time_and_an_old_dialect() -> None:
    off = dataclasses.replace(CELL, flash_attn="off", n_gen=0)
    argv = MnnLlmBench(precision=0, load_time=False).argv(off, BIN, CONFIG)
    assert argv == [BIN, "-m", CONFIG, "-a", "cpu", "-t", "4", "-c", "0", "-p", "64", "-n", "0",
                    "-rep", "3", "-mmp", "0", "-fa", "0"]
    old = MnnLlmBench(dialect=MnnDialect(flash_attn=False)).argv(CELL, BIN, CONFIG)
    assert "-fa" not in old and old[-2:] == ["-load", "true"]


def test_argv_refuses_what_llm_bench_cannot_take() -> None:
    engine = MnnLlmBench()
    with pytest.raises(EngineError, match="kv q8_0/q8_0"):
        engine.argv(dataclasses.replace(CELL, type_k="q8_0", type_v="q8_0"), BIN, CONFIG)
    with pytest.raises(EngineError, match=r"config\.json"):
        engine.argv(CELL, BIN, "/data/local/tmp/harness/models/qwen2.5-0.5b-mnn")
    with pytest.raises(EngineError, match="with its folder"):
        engine.argv(CELL, BIN, "config.json")  # llm_bench needs a '/' to find the folder
    with pytest.raises(EngineError, match="cannot pin"):
        engine.argv(CELL, BIN, CONFIG, cpu_mask="0xf0")


def test_the_engine_s_declared_members() -> None:
    engine = MnnLlmBench()
    assert engine.name == "mnn-llm-bench"
    assert engine.binary_name == "llm_bench"
    assert engine.aggregate_only is True


def test_dialect_from_help() -> None:
    new = "  -fa, --flash-attention <0|1>              (default: 1) | Note: 1=enable flash " \
          "attention, 0=disable\n"
    old = "  -qatten, --quant-attention <0|1>          (default: 0)\n"
    assert dialect_from_help(new) == MnnDialect(flash_attn=True)
    assert dialect_from_help(old) == MnnDialect(flash_attn=False)


# -- parsing and measuring ----------------------------------------------------------------------


def test_pp_and_tg_rows_with_the_loading_time_column() -> None:
    records = parse_output(PP_TG)
    assert [(r.kind, r.test, r.n_prompt, r.n_gen, r.shared_kv) for r in records] == [
        ("pp", "pp64", 64, 0, False), ("tg", "tg32", 0, 32, False)]
    pp = records[0]
    assert (pp.tps, pp.tps_sd, pp.load_s, pp.load_s_sd) == (812.35, 5.67, 1.23, 0.46)
    assert (pp.model, pp.backend, pp.n_threads, pp.precision) == (
        "qwen2.5-0.5b-mnn", "CPU", 4, "Low")
    assert pp.model_size_bytes == WEIGHTS
    assert pp.mmap is None and pp.flash_attn is None and pp.memory_mode is None
    assert pp.raw.startswith("| qwen2.5-0.5b-mnn") and pp.raw.endswith("|")
    data = pp.as_dict()
    assert data["n_threads"] == 4 and data["columns"]["t/s"] == "812.35 ± 5.67"

    (m,) = measure_records(records)
    assert (m.rep, m.prompt_tps, m.prompt_tps_sd, m.gen_tps, m.gen_tps_sd) == (
        0, 812.35, 5.67, 41.2, 0.3)
    assert m.ttft_s == pytest.approx(64 / 812.35)
    assert m.ttft_definition == TTFT_PROMPT
    assert m.load_s == 1.23  # the first row's: the launch's first loads
    assert m.peak_bytes is None
    assert m.aggregate_n is None  # the table does not say how many runs


def test_the_caller_s_repetitions_become_the_aggregate_s_n() -> None:
    engine = MnnLlmBench()
    records = engine.parse(EngineOutput(PP_TG, "[llm_bench] some warning\n"), repetitions=3)
    (m,) = engine.measure(records)
    assert m.aggregate_n == 3
    # records round-tripped through their dicts (the store's JSON) measure the same
    class Stored:
        def __init__(self, record: Record) -> None:
            self.raw, self.data = record.raw, record.as_dict()

        def as_dict(self) -> dict[str, object]:
            return dict(self.data)

    assert engine.measure([Stored(r) for r in records]) == [m]


def test_a_prompt_only_or_generation_only_cell() -> None:
    pp_only = _table([*DEFAULT_FIELDS, "test", "t/s"],
                     [{"test": "pp128", "t/s": _pm(1500.0, 12.5)}])
    (m,) = measure_records(parse_output(pp_only))
    assert (m.prompt_tps, m.gen_tps, m.gen_tps_sd, m.load_s) == (1500.0, None, None, None)
    assert m.ttft_s == pytest.approx(128 / 1500)
    tg_only = _table([*DEFAULT_FIELDS, "test", "t/s"], [{"test": "tg16", "t/s": _pm(38.5, 0)}])
    (m,) = measure_records(parse_output(tg_only))
    assert (m.prompt_tps, m.gen_tps, m.ttft_s, m.ttft_definition) == (None, 38.5, None, None)


def test_the_shared_kv_pp_tg_row_with_its_br_cell() -> None:
    """-pg P,G (MNN 5bc51d0b4 and later): one run, prefill then decode in one cell."""
    fields = [*DEFAULT_FIELDS, "test", "speed(tok/s)", "loadingTime(s)"]
    out = _table(fields, [{"test": "pp64+tg32", "speed(tok/s)": _two(790.0, 2.0, 40.0, 0.5),
                           "loadingTime(s)": _pm(1.1, 0.1)}])
    (record,) = parse_output(out)
    assert (record.kind, record.shared_kv, record.tps) == ("pg", True, None)
    assert (record.prefill_tps, record.prefill_tps_sd, record.decode_tps,
            record.decode_tps_sd) == (790.0, 2.0, 40.0, 0.5)
    (m,) = measure_records([record])
    assert (m.prompt_tps, m.prompt_tps_sd, m.gen_tps, m.gen_tps_sd) == (790.0, 2.0, 40.0, 0.5)
    assert m.ttft_s == pytest.approx(64 / 790) and m.load_s == 1.1


def test_standalone_rows_win_over_a_shared_kv_row() -> None:
    """-p 64 -n 32 -pg 64,32: the pp and tg rows keep one value in the speed(tok/s) column."""
    fields = [*DEFAULT_FIELDS, "test", "speed(tok/s)"]
    out = _table(fields, [{"test": "pp64", "speed(tok/s)": _pm(800.0, 1.0)},
                          {"test": "tg32", "speed(tok/s)": _pm(45.0, 0.2)},
                          {"test": "pp64+tg32", "speed(tok/s)": _two(790.0, 2.0, 40.0, 0.5)}])
    records = parse_output(out)
    assert [(r.kind, r.shared_kv) for r in records] == [("pp", False), ("tg", False),
                                                        ("pg", True)]
    (m,) = measure_records(records)
    assert (m.prompt_tps, m.gen_tps) == (800.0, 45.0)


def test_the_kv_cache_llm_demo_row_with_optional_columns() -> None:
    """-kv true: the llm_demo layout; here with --memory 0,2 and -mmp 1 as well."""
    fields = [*DEFAULT_FIELDS, "memory", "useMmap", "llm_demo", "speed(tok/s)"]
    out = _table(fields, [
        {"memory": "Normal", "useMmap": "true", "llm_demo": "prompt=64<br>decode=32",
         "speed(tok/s)": _two(700.5, 3.25, 35.75, 0.125)},
        {"memory": "Low", "useMmap": "true", "llm_demo": "prompt=64<br>decode=32",
         "speed(tok/s)": _two(650.0, 4.0, 36.0, 0.2)},
    ])
    records = parse_output(out)
    assert [(r.test, r.memory_mode, r.mmap, r.shared_kv) for r in records] == [
        ("prompt=64<br>decode=32", "Normal", True, True),
        ("prompt=64<br>decode=32", "Low", True, True)]
    assert records[0].columns["mmap"] == "true"
    (m,) = measure_records(records)
    assert (m.prompt_tps, m.prompt_tps_sd, m.gen_tps, m.gen_tps_sd) == (700.5, 3.25, 35.75,
                                                                        0.12)
    assert m.load_s is None


def test_every_optional_column_and_a_gib_model() -> None:
    fields = [*DEFAULT_FIELDS, "memory", "dynamicOption", "divisionRatioSme2Neon", "quantKv",
              "flashAttention", "smeCoreNum", "useMmap", "test", "t/s", "loadingTime(s)"]
    extra = {"modelSize": _size(4 * 1024**3 + 512 * 1024**2), "backend": "OPENCL",
             "precision": "High", "memory": "Low", "dynamicOption": "8",
             "divisionRatioSme2Neon": "49", "quantKv": "2", "flashAttention": "off",
             "smeCoreNum": "4", "useMmap": "true", "loadingTime(s)": _pm(3.5, 0.25)}
    out = _table(fields, [{**extra, "test": "pp512", "t/s": _pm(95.5, 1.5)},
                          {**extra, "test": "tg128", "t/s": _pm(12.25, 0.5)}])
    pp, tg = parse_output(out)
    assert pp.model_size_bytes == 4 * 1024**3 + 512 * 1024**2  # "4.50 GiB"
    assert (pp.backend, pp.precision, pp.flash_attn, pp.mmap, pp.memory_mode) == (
        "OPENCL", "High", "off", True, "Low")
    assert pp.columns["quantKv"] == "2" and pp.columns["smeCoreNum"] == "4"
    (m,) = measure_records([pp, tg])
    assert (m.prompt_tps, m.gen_tps, m.load_s) == (95.5, 12.25, 3.5)


def test_an_old_build_s_rows_combined_pg_and_a_nan_pp0_tg0_row() -> None:
    """Before MNN 5bc51d0b4, -pg gave one combined rate and -n 0 a pp0+tg0 row of nan; the
    naive sd formula can print nan for near-equal runs."""
    fields = [*DEFAULT_FIELDS, "test", "t/s"]
    out = _table(fields, [{"test": "pp64", "t/s": "812.00 ± -nan"},
                          {"test": "pp0+tg0", "t/s": "nan ± nan"},
                          {"test": "pp64+tg32", "t/s": _pm(120.0, 1.0)}])
    records = parse_output(out)
    assert [(r.kind, r.tps, r.tps_sd, r.shared_kv) for r in records] == [
        ("pp", 812.0, None, False), ("pg", 120.0, 1.0, False)]
    (m,) = measure_records(records)
    assert (m.prompt_tps, m.prompt_tps_sd, m.gen_tps) == (812.0, None, None)
    assert measure_records(records[1:]) == []  # a combined rate is never split


def test_a_table_cut_off_mid_row_drops_that_row() -> None:
    whole = PP_TG.rstrip("\n")
    last = whole.rindex("| qwen")
    cut = whole[: last + 60]  # inside the tg row's cells
    assert [r.test for r in parse_output(cut)] == ["pp64"]
    at_a_bar = whole[: whole.rindex("|", 0, len(whole) - 1) + 1]  # ends with "|", a cell short
    assert [r.test for r in parse_output(at_a_bar)] == ["pp64"]
    no_close = whole[:-1]  # the tg row without its closing "|"
    assert [r.test for r in parse_output(no_close)] == ["pp64"]
    header_only = LOG + _header(PP_TG_FIELDS)
    assert parse_output(header_only) == []
    no_separator = LOG + _header(PP_TG_FIELDS).splitlines()[0]  # cut before the separator
    assert parse_output(no_separator) == []


@pytest.mark.parametrize("text", [
    "",
    LOG,
    "error: invalid parameter for argument: /models/config.json\nusage: llm_bench [options]\n",
    "| a | b |\n| - | - |\n| 1 | 2 |\n",  # a table, not llm_bench's
])
def test_output_without_a_table_gives_nothing(text: str) -> None:
    assert parse_output(text) == []
    assert MnnLlmBench().measure(MnnLlmBench().parse(text)) == []


def test_only_stdout_is_read_and_crlf_lines_parse() -> None:
    engine = MnnLlmBench()
    assert engine.parse(EngineOutput("", PP_TG)) == []  # the table is never on stderr
    crlf = engine.parse(PP_TG.replace("\n", "\r\n"))
    assert [r.as_dict()["test"] for r in crlf] == ["pp64", "tg32"]


# -- what MNN cannot honour ---------------------------------------------------------------------


@pytest.mark.parametrize(("change", "reason"), [
    ({"compute_device": "Vulkan0", "n_gpu_layers": -1}, "vulkan included, on the CPU"),
    ({"compute_device": "HTP0", "n_gpu_layers": -1}, "(npu) is neither"),
    ({"compute_device": "CUDA0", "n_gpu_layers": -1}, "(gpu) is neither"),
    ({"type_k": "q8_0", "type_v": "q8_0"}, "KV cache unquantised at -qa 0"),
    ({"type_v": "q4_0", "flash_attn": "off"}, "kv f16/q4_0 cannot be asked"),
    ({"type_k": "f32", "type_v": "f32"}, "use f16"),
    ({"n_depth": 128}, "no depth option"),
    ({"affinity": "big"}, "affinity 'big' cannot be asked"),
    ({"affinity": "0xf0"}, "no CPU mask option"),
    ({"load_mode": "dio"}, "only -mmp 0|1 (mmap true or false), so load_mode dio"),
    ({"mmap": True, "load_mode": "mmap+mlock"}, "load_mode mmap+mlock cannot be asked"),
    ({"cache": "cold"}, "cannot honour a cache knob"),
    ({"cache": "warm"}, "the harness evicts or warms the model file it passes"),
    ({"n_gpu_layers": -1}, "device none runs every layer on the CPU"),
    ({"compute_device": "GPUOpenCL", "n_gpu_layers": 12}, "n_gpu_layers 12 on GPUOpenCL"),
    ({"compute_device": "GPUOpenCL", "n_gpu_layers": 0}, "no partial offload"),
    ({"compute_device": "GPUOpenCL", "n_gpu_layers": -1, "flash_attn": "on"}, "ignores -fa"),
    ({"sustained_s": 60.0}, "sustained cell"),
    ({"swa_full": True}, "sliding-window"),
    ({"n_prompt": 0, "n_gen": 0}, "measure nothing"),
    ({"repetitions": 0}, "-rep 0 times nothing"),
])
def test_supports_says_why(change: dict[str, object], reason: str) -> None:
    cell = dataclasses.replace(CELL, **change)  # type: ignore[arg-type]
    got = MnnLlmBench().supports(cell)
    assert got is not None and reason in got, got
    assert support_problem(MnnLlmBench(), cell) == (ENGINE_UNSUPPORTED, got)


def test_a_workload_beyond_n_ctx_is_the_shared_context_rule() -> None:
    cell = dataclasses.replace(CELL, n_prompt=500, n_gen=64)
    code, reason = support_problem(MnnLlmBench(), cell) or ("", "")
    assert code == EXCEEDS_CTX and "n_ctx is 512" in reason


def test_flash_attention_needs_fa_in_the_build() -> None:
    old = MnnLlmBench(dialect=MnnDialect(flash_attn=False))
    reason = old.supports(dataclasses.replace(CELL, flash_attn="off"))
    assert reason is not None and "no -fa" in reason
    assert old.supports(CELL) is None  # auto: the build's own attention


@pytest.mark.parametrize("change", [
    {},
    {"compute_device": "GPUOpenCL", "n_gpu_layers": -1},
    {"compute_device": "OpenCL0", "n_gpu_layers": -1, "flash_attn": "auto"},
    {"flash_attn": "on"},
    {"flash_attn": "off"},
    {"n_prompt": 0},
    {"n_gen": 0},
    {"mmap": True, "load_mode": "mmap"},  # the same as mmap true: one spelling per cell
])
def test_supported_cells(change: dict[str, object]) -> None:
    assert MnnLlmBench().supports(dataclasses.replace(CELL, **change)) is None  # type: ignore[arg-type]


# -- OpenCL's -t, token counts, and tables the real tool printed --------------------------------


@pytest.mark.parametrize("threads", [1, 2, 8, 16])
def test_an_opencl_cell_takes_no_threads_axis(threads: int) -> None:
    """On -a opencl MNN reads -t's low bits as the tuning level: t1 would be none, t8 normal."""
    reason = MnnLlmBench().supports(dataclasses.replace(OPENCL, threads=threads))
    assert reason is not None and "not a thread count" in reason and "tuning" in reason
    assert MnnLlmBench().supports(dataclasses.replace(CELL, threads=threads)) is None  # CPU


def test_opencl_s_minus_t_is_the_adapter_s_tuning_level() -> None:
    engine = MnnLlmBench(opencl_tuning="normal")
    argv = engine.argv(OPENCL, BIN, CONFIG)
    assert argv[argv.index("-t") + 1] == "8"  # MNN_GPU_TUNING_NORMAL, 1 << 3
    cpu = engine.argv(dataclasses.replace(CELL, threads=6), BIN, CONFIG)
    assert cpu[cpu.index("-t") + 1] == "6"  # the CPU's -t is the cell's threads
    with pytest.raises(EngineError, match="not an MNN tuning level"):
        MnnLlmBench(opencl_tuning="max")


def test_an_opencl_row_s_threads_column_is_not_read_as_threads() -> None:
    text = _table(PP_TG_FIELDS, [{"backend": "OPENCL", "test": "tg32", "t/s": _pm(20.5, 0.1),
                                  "loadingTime(s)": _pm(2.0, 0.1)}])
    (record,) = parse_output(text)
    assert record.backend == "OPENCL" and record.columns["threads"] == "4"
    assert record.n_threads is None and record.as_dict()["n_threads"] is None


def test_records_report_no_token_counts_the_table_does_not_print() -> None:
    """tg32 is what -n asked; a model that stopped at an end token ran fewer steps."""
    for record in parse_output(PP_TG):
        data = record.as_dict()
        assert "prompt_tokens" not in data and "generated_tokens" not in data


def test_the_table_in_mnn_s_docs() -> None:
    records = parse_output((DATA / "mnn_llm_bench_docs.txt").read_text(), repetitions=3)
    assert [(r.kind, r.test, r.shared_kv) for r in records] == [
        ("pp", "pp512", False), ("tg", "tg128", False), ("pg", "pp512+tg128", True)]
    assert records[0].backend == "METAL" and records[0].model_size_bytes == round(
        355.68 * 1024**2)
    assert (records[2].prefill_tps, records[2].decode_tps) == (5061.44, 293.40)
    (m,) = measure_records(records)
    assert (m.prompt_tps, m.gen_tps, m.aggregate_n) == (5073.12, 345.85, 3)


def test_a_table_from_an_mnn_issue() -> None:
    """A reporter's CPU run, with two columns of their own appended to each row."""
    records = parse_output((DATA / "mnn_llm_bench_issue3806.txt").read_text())
    assert [r.test for r in records] == ["pp512", "pp1024", "pp1536", "pp2048", "tg128"]
    assert {(r.backend, r.n_threads, r.precision) for r in records} == {("CPU", 4, "Low")}
    (m,) = measure_records(records)
    assert (m.prompt_tps, m.prompt_tps_sd, m.gen_tps, m.gen_tps_sd) == (
        344.09, 0.53, 45.58, 0.02)
