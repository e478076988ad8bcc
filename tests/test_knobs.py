"""The knob registry (harness/knobs.py): one declaration per knob, read by the matrix, the cell,
the labels, the store and the schema file; device and n_gpu_layers as the first two."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from harness import knobs
from harness.cell import Cell
from harness.errors import ConfigError
from harness.labels import CONFIG_COLUMNS, config_label
from harness.matrix import AXES, AXIS_DEFAULTS, expand, parse_matrix
from harness.records import TrialRecord

REPO = Path(__file__).resolve().parents[1]
BASE: dict[str, Any] = {
    "name": "g", "models": {"tiny": {"ladder": "tiny"}}, "workload": {"n_prompt": 8, "n_gen": 4},
}


def _matrix(**axes: Any) -> Any:
    return parse_matrix({**BASE, "axes": {"build": "b", "model": "tiny", "quant": "Q8_0",
                                          "n_ctx": 64, **axes}}, "m.yaml")


def test_every_knob_is_an_axis_a_cell_field_a_column_and_a_schema_entry() -> None:
    schema = json.loads((REPO / "matrices" / "matrix.schema.json").read_text())["properties"]
    cell_fields = {f.name: f for f in dataclasses.fields(Cell)}
    columns = get_type_hints(TrialRecord)
    for knob in knobs.KNOBS:
        assert knob.axis in AXES and knobs.axis_value(AXIS_DEFAULTS, knob) == knob.default
        field = cell_fields[knob.name].default  # n_batch, n_ubatch: a cell always states them
        assert field == knob.default or (field is dataclasses.MISSING and not knob.quiet_in_ids)
        assert knob.column in CONFIG_COLUMNS and knob.column in columns
        if knob.part is not None:  # kv's type_k and type_v: the file describes the pair
            assert set(knob.schema["enum"]) == set(
                schema["axes"]["properties"]["kv"]["oneOf"][0]["oneOf"][1]["properties"][
                    knob.name]["enum"])
            continue
        assert schema["axes"]["properties"][knob.axis] == knob.axis_schema()
        assert schema["include"]["items"]["properties"][knob.axis] == dict(knob.schema)
        assert schema["exclude"]["items"]["properties"][knob.axis] == dict(knob.schema)


def test_a_knob_at_its_default_keeps_the_ids_of_cells_made_before_it() -> None:
    cell = expand(_matrix())[0]
    assert cell.compute_device == "none" and cell.n_gpu_layers == 0
    assert "compute_device" not in cell.identity() and "n_gpu_layers" not in cell.identity()
    gpu = dataclasses.replace(cell, compute_device="Vulkan0", n_gpu_layers=-1)
    assert gpu.identity()["compute_device"] == "Vulkan0" and gpu.cell_id != cell.cell_id
    assert gpu.config_id != cell.config_id  # another configuration, not another build


def test_labels_say_where_the_model_runs_only_off_the_cpu() -> None:
    cell = expand(_matrix())[0]
    assert "ngl" not in config_label(cell.row())
    gpu = dataclasses.replace(cell, compute_device="Vulkan0", n_gpu_layers=-1)
    assert config_label(gpu.row()).endswith("Vulkan0/ngl=all")
    assert "Vulkan0/ngl=2" in dataclasses.replace(gpu, n_gpu_layers=2).label()


def test_half_is_half_the_offloadable_layers_of_each_model() -> None:
    cells = expand(_matrix(compute_device=["Vulkan0"], n_gpu_layers=[0, "half", "all"]))
    # tiny has 3 repeating layers; llama.cpp offloads 4 (the output layer counts)
    assert [c.n_gpu_layers for c in cells] == [0, 2, -1]


@pytest.mark.parametrize(("axes", "problem"), [
    ({"n_gpu_layers": -1}, "axes.n_gpu_layers[0]: -1 is below 0"),
    ({"n_gpu_layers": "most"}, 'axes.n_gpu_layers[0]: "most" is not a layer count'),
    ({"n_gpu_layers": True}, "axes.n_gpu_layers[0]: True is not a layer count"),
    ({"compute_device": "Vulkan 0"},
     'axes.compute_device[0]: "Vulkan 0" is not a compute device'),
    ({"compute_device": 3}, "axes.compute_device[0]: 3 is not a compute device"),
    # an older matrix's name of the axis: the message names the key as the file spells it
    ({"device": "Vulkan 0"}, 'axes.device[0]: "Vulkan 0" is not a compute device'),
])
def test_bad_knob_values_name_the_file_and_key(axes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        _matrix(**axes)
    assert str(error.value).startswith(f"m.yaml: {problem}")
    assert "\n" not in str(error.value)


def test_half_of_a_model_whose_layers_are_unknown_is_one_clear_line(tmp_path: Path) -> None:
    data = {**BASE, "models": {"x": {"path": str(tmp_path / "absent-{quant}.gguf")}},
            "axes": {"build": "b", "model": "x", "quant": "Q8_0", "n_ctx": 64,
                     "compute_device": "Vulkan0", "n_gpu_layers": "half"}}
    with pytest.raises(ConfigError, match=re.escape("axes.n_gpu_layers: model x: n_gpu_layers "
                                                    "half needs the model's layer count")):
        parse_matrix(data, "m.yaml")


def test_offload_follows_llama_cpp_output_layer_first() -> None:
    """src/llama-model.cpp numbers the output layer after the repeating ones and offloads from
    the end: -ngl 1 is the output layer alone, -ngl n_layer+1 (or -1) is everything."""
    assert (knobs.offloaded_layers(0, 8), knobs.output_offloaded(0)) == (0, False)
    assert (knobs.offloaded_layers(1, 8), knobs.output_offloaded(1)) == (0, True)
    assert knobs.offloaded_layers(5, 8) == 4
    assert knobs.offloaded_layers(9, 8) == knobs.offloaded_layers(-1, 8) == 8
    assert knobs.offloaded_layers(99, 8) == 8
    assert knobs.offload_problem("none", 0) is None and knobs.offload_problem("Vulkan0", 0) is None
    assert "needs a device" in (knobs.offload_problem("none", -1) or "")


def test_a_stored_row_from_before_the_knobs_reads_as_their_defaults() -> None:
    import pandas as pd

    from harness.knobs import offload_of

    assert offload_of({}) == ("none", 0)
    assert offload_of({"compute_device": float("nan"), "n_gpu_layers": pd.NA}) == ("none", 0)
    assert offload_of({"compute_device": "", "n_gpu_layers": None}) == ("none", 0)
    row = pd.DataFrame([{"compute_device": "Vulkan0", "n_gpu_layers": -1}]).iloc[0].to_dict()
    assert offload_of(row) == ("Vulkan0", -1)
    assert isinstance(offload_of(row)[1], int)
