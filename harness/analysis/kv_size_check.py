"""The predictor's KV term against llama.cpp's own report, cell by cell, on this host.

For each cell the vendored llama.cpp (through llama-cpp-python, in a child process so its log
can be read) loads the model and creates the cell's context: that is enough for llama.cpp to
size and log its caches ("llama_kv_cache: size = ..."), and no token is computed, so even a
32k-token context is checked in about a second. The prediction is ``harness.memory``'s KV term
for the same cell. A model file that is absent is reported, not guessed.

Every cell's load runs in one child (``python -m harness.analysis.kv_size_check``): pybench's
load, cell after cell, each model and context freed before the next and each cell's log marked
off, so llama-cpp-python is imported once, not once per cell. A cell the child did not finish
(it died) is loaded again in a child of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.artifacts.gguf_info import ModelInfo
from harness.cell import Cell
from harness.engines.base import flash_attn_setting
from harness.engines.llamalog import EngineMemoryLog, parse_memory_log
from harness.engines.pybench import flag
from harness.memory import ModelCard, predict_peak

TOLERANCE = 0.02  # the bound: within 2 % of llama.cpp's figure
MARK = "@@kv-check cell "  # the batch child's stderr line before, and after, each cell's load


@dataclass(frozen=True)
class KvCheck:
    cell: Cell
    predicted_bytes: int | None
    reported_bytes: int | None
    reported_caches: int  # how many caches llama.cpp logged for the context (2 with SWA)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        if not self.predicted_bytes or not self.reported_bytes:
            return None
        return self.predicted_bytes / self.reported_bytes

    @property
    def within(self) -> bool:
        ratio = self.ratio
        return ratio is not None and abs(ratio - 1) <= TOLERANCE

    def as_dict(self) -> dict[str, Any]:
        return {"cell_id": self.cell.cell_id, "label": self.cell.label(),
                "quant": self.cell.quant, "n_ctx": self.cell.n_ctx, "type_k": self.cell.type_k,
                "type_v": self.cell.type_v, "swa_full": self.cell.swa_full,
                "predicted_bytes": self.predicted_bytes, "reported_bytes": self.reported_bytes,
                "reported_caches": self.reported_caches, "ratio": self.ratio,
                "within": self.within, "error": self.error}


def load_command(model_path: str, cell: Cell) -> list[str]:
    """The child process: pybench loads the model and makes the cell's context, then exits."""
    flash, _ = flash_attn_setting(cell)
    return [sys.executable, "-m", "harness.engines.pybench", "--model", model_path,
            "--n-ctx", str(cell.n_ctx), flag("n_batch"), str(cell.n_batch),
            flag("n_ubatch"), str(cell.n_ubatch), flag("type_k"), cell.type_k,
            flag("type_v"), cell.type_v,
            flag("flash_attn"), str(flash), flag("load_mode"), cell.resolved_load_mode,
            "--swa-full" if cell.swa_full else "--no-swa-full", flag("threads"), "1",
            "--verbose", "--load-only"]


def engine_report(model_path: str, cell: Cell, timeout_s: float = 120.0) -> EngineMemoryLog:
    done = subprocess.run(load_command(model_path, cell), capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    return parse_memory_log(done.stderr)


def split_sections(stderr: str, count: int) -> list[str | None]:
    """Each cell's part of the batch child's log, None for a cell it did not finish (pure)."""
    sections: list[str | None] = [None] * count
    current: int | None = None
    lines: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(MARK):
            index, _, state = line[len(MARK):].partition(" ")
            if state == "start" and index.isdigit():
                current, lines = int(index), []
            elif (state.startswith("end") and current is not None and index == str(current)
                  and current < count):
                sections[current] = "\n".join(lines)
                current = None
        elif current is not None:
            lines.append(line)
    return sections


def engine_reports(loads: Sequence[tuple[str, Cell]],
                   timeout_s: float = 120.0) -> list[EngineMemoryLog]:
    """llama.cpp's log of each (model path, cell) load, all in one child; a cell it did not
    finish again in a child of its own."""
    if not loads:
        return []
    argvs = [load_command(path, cell)[3:] for path, cell in loads]  # after "-m pybench"
    try:
        done = subprocess.run([sys.executable, "-m", "harness.analysis.kv_size_check"],
                              input=json.dumps(argvs), capture_output=True, text=True,
                              timeout=timeout_s * len(loads), check=False)
        sections = split_sections(done.stderr, len(loads))
    except subprocess.TimeoutExpired:
        sections = [None] * len(loads)
    return [parse_memory_log(text) if text is not None else engine_report(path, cell, timeout_s)
            for text, (path, cell) in zip(sections, loads, strict=True)]


def check_cells(cells: Iterable[Cell],
                models: Mapping[tuple[str, str], ModelInfo | ModelCard | Any]) -> list[KvCheck]:
    pairs = [(cell, models.get((cell.model, cell.quant))) for cell in cells]
    logs = iter(engine_reports([(model.path, cell) for cell, model in pairs
                                if isinstance(model, ModelInfo)]))
    out = []
    for cell, model in pairs:
        if not isinstance(model, ModelInfo):
            out.append(KvCheck(cell, None, None, 0, "no model file to load"))
            continue
        predicted = predict_peak(cell, model).kv
        log = next(logs)
        error = None if log.kv_bytes else "llama.cpp logged no KV cache (the load failed?)"
        out.append(KvCheck(cell, predicted, log.kv_bytes, len(log.kv_caches), error))
    return out


def _batch(argvs: Sequence[Sequence[str]]) -> None:
    """The batch child: pybench's load of each argv in turn, each marked off on stderr."""
    from harness.engines import pybench

    for index, argv in enumerate(argvs):
        sys.stderr.flush()
        os.write(2, f"{MARK}{index} start\n".encode())
        try:
            code = pybench.main(list(argv))
        except SystemExit as stop:  # pybench refuses a cell this way: the next one still runs
            code = stop.code if isinstance(stop.code, int) else 1
        sys.stderr.flush()
        os.write(2, f"{MARK}{index} end {code}\n".encode())


if __name__ == "__main__":
    _batch(json.loads(sys.stdin.read()))
