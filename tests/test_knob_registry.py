"""The knob registry is the one declaration of a knob: a toy knob declared in ``KNOBS`` alone
reaches the matrix schema, the cell id, the label, the store and llama-bench's command line;
and moving the older knobs into the registry changed no cell id, label, stored row or command
line of the shipped matrices (pinned on main at 7eb8176, before the registry held them)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.engines.llama_bench import Dialect, LlamaBench
from harness.matrix import expand, load_matrix

REPO = Path(__file__).resolve().parents[1]

#: matrix, cells, then sha256[:16] of: every cell's "cell_id config_id label"; every cell's
#: stored row (JSON, sorted keys; the new ``knobs`` column left out while it is null); every
#: cell's llama-bench argv (or its refusal) with a new and an old dialect; the first cell's id
#: and label. Computed by this test's own code on 7eb8176, before the registry held them.
PINNED = (
    ("bigger-than-ram.yaml", 5, "06c82894eeae3bef", "c3eec9c1d51eb3b9", "23da1d2006d6ab10",
     "cf5e8a71cbc2e494", "bench F16 ctx256 kv=f16 t1 fa=auto p16/g8 b64/ub64 cache=cold"),
    ("builds.yaml", 4, "364cfc5dfd3826e4", "bed80484d4f0b5dd", "4d06d6dd3fe37e92",
     "20b2676b5b80efef", "tiny Q8_0 ctx512 kv=f16 t1 fa=auto p64/g64 b256/ub128"),
    ("engines-phone.yaml", 5, "57f97a96f45f6f5f", "56afdb0177fbc17f", "fd20b0115190b9a6",
     "5c2e28ae1f447606", "qwen Q4_0 ctx1024 kv=f16 t4 fa=auto p128/g64 b2048/ub512"),
    ("engines.yaml", 4, "ae2aaaf2fbdc04be", "e3201acd0c859596", "f768e8b715764edf",
     "b4d45aadbc336e88", "tiny Q8_0 ctx512 kv=f16 t1 fa=auto p32/g16 b256/ub128"),
    ("gpu.yaml", 12, "151c25592fcbace5", "29c1523fcc915a5b", "2a333f2b95e118df",
     "5f75864b473797db", "bench Q8_0 ctx32 kv=f16 t2 fa=auto p16/g4 b2048/ub512"),
    ("nightly.yaml", 206, "2b5b52f0fc55bb2c", "0e6234ef7f6c7143", "0a6656d5b2009364",
     "c56bfe2db4800c19", "llama-3.2-1b Q8_0 ctx512 kv=f16 t4 fa=on p256/g64 b512/ub512"),
    ("real-kv.yaml", 42, "88ce0eeb4af8f99f", "0850cf74e4d6c204", "7045e0620d6e5445",
     "c575922439659456", "gemma3 Q4_K_M ctx512 kv=f16 t1 fa=on p64/g16 b2048/ub512"),
    ("real.yaml", 14, "914de5d8ed47536b", "c2975ce3dc2676f7", "4a3696ff8c30cdc8",
     "d2f4026ae7646589", "gemma3 F16 ctx512 kv=f16 t1 fa=on p32/g16/dfill b256/ub256"),
    ("smoke.yaml", 8, "da1d062f8af8014d", "780377d7960b7155", "6702e34aae48d101",
     "3e02e45fcd07822e", "tiny Q8_0 ctx256 kv=f16 t1 fa=auto p32/g16/dfill b256/ub128"),
    ("sustained.yaml", 2, "71cca1c7bbb44bd7", "ec34853f4fb89f66", "3e96616a3d9732ab",
     "33c2f8bb027aa1d8", "bench Q8_0 ctx512 kv=f16 t1 fa=auto p32/g64 b256/ub128 sustained30s"),
)


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _argv(cells: list[Any]) -> list[str]:
    out = []
    for dialect in (Dialect(), Dialect(load_mode=False, device=False, flash_attn_words=False)):
        bench = LlamaBench(dialect)
        for cell in cells:
            refusal = bench.supports(cell)
            out.append(refusal if refusal else " ".join(bench.argv(cell, "bin", "m", "0xf0")))
    return out


@pytest.mark.parametrize(("name", "count", "ids", "rows", "argv", "first_id", "first_label"),
                         PINNED, ids=[p[0] for p in PINNED])
def test_shipped_matrices_keep_their_ids_labels_rows_and_command_lines(
        name: str, count: int, ids: str, rows: str, argv: str, first_id: str,
        first_label: str) -> None:
    cells = expand(load_matrix(REPO / "matrices" / name))
    assert len(cells) == count
    assert (cells[0].cell_id, cells[0].label()) == (first_id, first_label)
    assert _digest([f"{c.cell_id} {c.config_id} {c.label()}" for c in cells]) == ids
    stored = [{k: v for k, v in c.row().items() if not (k == "knobs" and v is None)}
              for c in cells]
    assert _digest([json.dumps(r, sort_keys=True, default=str) for r in stored]) == rows
    assert _digest(_argv(cells)) == argv


# A fresh interpreter adds one Knob to the registry, as a new knob is added to harness/knobs.py,
# before anything reads it; everything else is the harness as it is.
_TOY = r"""
import json, sys, tempfile
from pathlib import Path
from harness import knobs
knobs.KNOBS += (knobs.Knob("toy", "toy", "toy", 1, knobs.count(1), "a toy knob",
                           {"type": "integer", "minimum": 1}, label=lambda v: f"toy{v}",
                           attribute=False, flags=(("llama-bench", "--toy"),)),)
from harness.engines.llama_bench import LlamaBench
from harness.errors import ConfigError
from harness.matrix import expand, parse_matrix
from harness.records import TrialIds, new_trial
from harness.store import read_table, write_part

def matrix(**axes):
    return parse_matrix({"name": "toy", "models": {"tiny": {"ladder": "tiny"}},
                         "workload": {"n_prompt": 8, "n_gen": 4},
                         "axes": {"build": "b", "model": "tiny", "quant": "Q8_0", "n_ctx": 64,
                                  **axes}}, "toy.yaml")

plain, (one, three) = expand(matrix())[0], expand(matrix(toy=[1, 3]))
try:
    matrix(toy=0)
    refused = None
except ConfigError as error:
    refused = str(error)
root = Path(tempfile.mkdtemp())
write_part(root, "trials", [new_trial(TrialIds("r", f"t{i}", "j", "S", 0), c, "ok")
                            for i, c in enumerate((one, three))], "r")
stored = read_table(root, "trials").sort_values("trial_id").to_dict("records")
json.dump({
    "schema": knobs.schema_properties().get("toy"),
    "ids": [plain.cell_id, one.cell_id, three.cell_id], "configs": [one.config_id, three.config_id],
    "labels": [one.label(), three.label()], "refused": refused,
    "stored": [knobs.stored(r, "toy") for r in stored],
    "argv": LlamaBench().argv(three, "bin", "m"),
}, sys.stdout)
"""


def test_a_knob_declared_once_reaches_schema_ids_label_store_and_argv() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _TOY], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    one = {"type": "integer", "minimum": 1}
    assert seen["schema"] == {"oneOf": [one, {"type": "array", "minItems": 1, "items": one}]}
    plain, at_default, three = seen["ids"]
    assert plain == at_default != three  # at its default the knob leaves every id as it was
    assert seen["configs"][0] != seen["configs"][1]  # another configuration, not another build
    assert "toy" not in seen["labels"][0] and seen["labels"][1].endswith(" toy3")
    assert seen["refused"] == ("toy.yaml: axes.toy[0]: 0 is out of range (allowed: integers "
                               ">= 1)")
    assert seen["stored"] == [1, 3]
    argv = seen["argv"]
    assert argv[argv.index("--toy") + 1] == "3"


def test_a_generic_engine_names_knobs_not_the_cells_extra_pairs() -> None:
    from harness.engines.generic_yaml import engine_from_dict
    from harness.errors import ConfigError

    output = {"format": "jsonl", "gen_tps": "tg"}
    engine_from_dict({"name": "t", "argv": ["{binary}", "{n_ubatch}"], "output": output}, "t.yaml")
    with pytest.raises(ConfigError, match=r"uses \{extra\}"):
        engine_from_dict({"name": "t", "argv": ["{binary}", "{extra}"], "output": output},
                         "t.yaml")
