"""Matrices: expansion semantics (include/exclude), validation messages, the shipped files."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from harness.cell import KV_TYPES
from harness.cli import main
from harness.errors import ConfigError
from harness.matrix import (
    AXES,
    QUANTS,
    REQUIRE_KEYS,
    TOP_KEYS,
    Requirements,
    expand,
    load_matrix,
    parse_matrix,
)

REPO = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "data" / "matrices"

BASE: dict[str, Any] = {
    "name": "t",
    "axes": {
        "build": ["b1"],
        "model": ["tiny"],
        "quant": ["Q8_0", "Q4_K_M"],
        "n_ctx": [256, 512],
    },
    "models": {"tiny": {"ladder": "tiny"}},
    "workload": {"n_prompt": 32, "n_gen": 16},
}


def matrix_with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if key in AXES:
            data["axes"][key] = value
        else:
            data[key] = value
    return data


def points(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (c.quant, c.n_ctx, c.type_k, c.type_v, c.threads, c.n_depth)
        for c in expand(parse_matrix(data, "m.yaml"))
    ]


def test_expansion_is_the_product_in_axis_order_last_axis_fastest() -> None:
    assert points(matrix_with(threads=[2, 4])) == [
        ("Q8_0", 256, "f16", "f16", 2, 0), ("Q8_0", 256, "f16", "f16", 4, 0),
        ("Q8_0", 512, "f16", "f16", 2, 0), ("Q8_0", 512, "f16", "f16", 4, 0),
        ("Q4_K_M", 256, "f16", "f16", 2, 0), ("Q4_K_M", 256, "f16", "f16", 4, 0),
        ("Q4_K_M", 512, "f16", "f16", 2, 0), ("Q4_K_M", 512, "f16", "f16", 4, 0),
    ]


def test_exclude_removes_every_combination_it_partially_matches() -> None:
    got = points(matrix_with(threads=[2, 4], exclude=[{"quant": "Q8_0", "threads": 4}]))
    assert got == [
        ("Q8_0", 256, "f16", "f16", 2, 0), ("Q8_0", 512, "f16", "f16", 2, 0),
        ("Q4_K_M", 256, "f16", "f16", 2, 0), ("Q4_K_M", 256, "f16", "f16", 4, 0),
        ("Q4_K_M", 512, "f16", "f16", 2, 0), ("Q4_K_M", 512, "f16", "f16", 4, 0),
    ]


def test_include_matching_original_axes_extends_those_combinations() -> None:
    got = points(matrix_with(include=[{"n_ctx": 512, "n_depth": 256}]))
    assert got == [
        ("Q8_0", 256, "f16", "f16", 4, 0), ("Q8_0", 512, "f16", "f16", 4, 256),
        ("Q4_K_M", 256, "f16", "f16", 4, 0), ("Q4_K_M", 512, "f16", "f16", 4, 256),
    ]


def test_include_can_set_an_axis_the_matrix_leaves_at_its_default() -> None:
    got = points(matrix_with(include=[{"quant": "Q4_K_M", "n_ctx": 256, "threads": 8}]))
    assert got[2] == ("Q4_K_M", 256, "f16", "f16", 8, 0) and len(got) == 4


def test_include_matching_nothing_adds_a_new_combination() -> None:
    rule = {"build": "b1", "model": "tiny", "quant": "Q2_K", "n_ctx": 1024, "kv": "q8_0"}
    got = points(matrix_with(include=[rule]))
    assert len(got) == 5 and got[-1] == ("Q2_K", 1024, "q8_0", "q8_0", 4, 0)


def test_include_does_not_extend_combinations_that_were_excluded() -> None:
    data = matrix_with(
        exclude=[{"quant": "Q8_0"}],
        include=[{"build": "b1", "model": "tiny", "quant": "Q8_0", "n_ctx": 256}],
    )
    got = points(data)
    assert got[-1] == ("Q8_0", 256, "f16", "f16", 4, 0) and len(got) == 3


def test_include_with_only_extra_keys_extends_every_combination() -> None:
    got = points(matrix_with(include=[{"n_depth": 64}]))
    assert {p[-1] for p in got} == {64} and len(got) == 4


def test_a_new_combination_must_set_every_axis() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_matrix(matrix_with(include=[{"quant": "Q2_K"}]), "m.yaml")
    assert str(caught.value) == (
        "m.yaml: include[0]: matches no combination, so it adds one, but leaves axis 'build' "
        "unset (a new combination sets every axis of the matrix: build, model, quant, n_ctx)"
    )


def test_duplicate_cells_are_kept_once() -> None:
    assert len(points(matrix_with(n_ctx=[256, 512, 256]))) == 4
    assert len(points(matrix_with(kv=["f16", "f16/f16", {"type_k": "f16", "type_v": "f16"}]))) == 4


def test_kv_values_can_be_one_type_a_k_slash_v_string_or_a_pair() -> None:
    got = points(matrix_with(quant=["Q8_0"], n_ctx=[256],
                             kv=["q4_0", "q8_0/f16", {"type_k": "f16", "type_v": "iq4_nl"}]))
    assert [(p[2], p[3]) for p in got] == [("q4_0", "q4_0"), ("q8_0", "f16"), ("f16", "iq4_nl")]


def test_yaml_on_and_off_become_flash_attention_values() -> None:
    data = yaml.safe_load("axes: {flash_attn: [on, off, auto]}")
    cells = expand(parse_matrix(matrix_with(flash_attn=data["axes"]["flash_attn"]), "m.yaml"))
    assert sorted({c.flash_attn for c in cells}) == ["auto", "off", "on"]


def test_undeclared_axes_take_documented_defaults_and_policies_have_defaults() -> None:
    matrix = parse_matrix(BASE, "m.yaml")
    cell = expand(matrix)[0]
    assert (cell.type_k, cell.threads, cell.affinity, cell.flash_attn, cell.mmap) == (
        "f16", 4, "all", "auto", True)
    assert (cell.n_batch, cell.n_ubatch, cell.repetitions) == (2048, 512, 3)
    assert matrix.timeout.trial_s == 600 and matrix.cooldown.max_thermal_status == 1


def test_cell_ids_are_stable_and_config_ids_pair_builds() -> None:
    one = expand(parse_matrix(matrix_with(build=["a", "b"]), "m.yaml"))
    two = expand(parse_matrix(matrix_with(build=["a", "b"]), "other.yaml"))
    assert [c.cell_id for c in one] == [c.cell_id for c in two]
    a, b = one[0], one[4]
    assert (a.build, b.build) == ("a", "b") and a.config_id == b.config_id != a.cell_id


def test_quant_and_affinity_are_normalised() -> None:
    cells = expand(parse_matrix(matrix_with(quant=["q4_k_m"], affinity=["BIG", "0xF0"]), "m"))
    assert {c.quant for c in cells} == {"Q4_K_M"} and {c.affinity for c in cells} == {"big", "0xf0"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_ctx": [256, 512, "big"]},
         'axes.n_ctx[2]: "big" is not an integer (allowed: integers >= 1)'),
        ({"threads": [0]}, "axes.threads[0]: 0 is out of range (allowed: integers >= 1)"),
        ({"threads": [True]}, "axes.threads[0]: true is not an integer (allowed: integers >= 1)"),
        ({"kv": ["f16", "q3_0"]}, 'axes.kv[1]: unknown KV cache type "q3_0" (allowed: '
                                  + ", ".join(KV_TYPES) + ")"),
        ({"quant": ["Q4_K_X"]}, 'axes.quant[0]: unknown quant "Q4_K_X" (allowed: '
                                + ", ".join(QUANTS) + ")"),
        ({"quant": []}, "axes.quant: empty list (an axis needs at least one value)"),
        ({"affinity": ["little"]}, 'axes.affinity[0]: "little" is not a CPU affinity (allowed: '
                                   "all, big, or a non-zero hex mask such as 0xf0)"),
        ({"mmap": ["yes"]}, 'axes.mmap[0]: "yes" is not a boolean (allowed: true, false)'),
        ({"exclude": [{"thread": 2}]},
         "exclude[0].thread: unknown axis (axes of this matrix: build, model, quant, n_ctx)"),
        ({"exclude": [{"quant": "Q2_K"}]},
         'exclude[0].quant: "Q2_K" is not a value of axis quant (values: Q8_0, Q4_K_M)'),
        ({"include": [{"quant": "Q2_K", "sparkle": 1}]},
         "include[0].sparkle: unknown axis (allowed: " + ", ".join(AXES)
         + ", n_prompt, n_gen, n_depth, sustained)"),
        ({"repetitions": 0}, "repetitions: 0 is out of range (allowed: integers >= 1)"),
        ({"workload": {"n_prompt": 0, "n_gen": 0}},
         "workload: n_prompt and n_gen are both 0 (nothing to measure)"),
        ({"cooldown": {"max_thermal_status": 9}},
         "cooldown.max_thermal_status: 9 is out of range (allowed: integers between 0 and 6)"),
        ({"models": {"tiny": {"ladder": "huge"}}},
         'models.tiny.ladder: unknown ladder size "huge" (allowed: tiny, bench, moe, gemma3-270m)'),
        ({"models": {"tiny": {"path": "m-{quant}.gguf", "card": {"n_layer": 2}}}},
         "models.tiny.card: missing key 'n_head' (a card needs: n_layer, n_head, n_head_kv, "
         "head_dim, n_embd, n_ff, n_vocab, n_params)"),
        ({"models": {"tiny": {"path": "m-{q}.gguf"}}},
         "models.tiny.path: \"m-{q}.gguf\" is not a valid template ('q'; the only placeholder "
         "is {quant}, write {{ and }} for literal braces)"),
        ({"model": ["tiny", "phi"]},
         'axes.model[1]: model "phi" is not declared in models (declared: tiny)'),
        ({"exclude": [{"n_ctx": 256}, {"n_ctx": 512}]},
         "exclude removes every combination (nothing to run)"),
        ({"require": {"battery_saver": "off"}},
         'require.battery_saver: "off" is not a boolean (allowed: true, false)'),
        ({"require": {"screen": True}},
         "require.screen: unknown key (allowed: screen_on, stay_awake, charging, "
         "battery_saver, doze)"),
        ({"require": ["screen_on"]}, 'require: must be a mapping of keys, got ["screen_on"]'),
    ],
)
def test_validation_names_the_key_path_the_value_and_what_is_allowed(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_matrix(matrix_with(**changes), "m.yaml")
    assert str(caught.value) == f"m.yaml: {message}"


def test_card_accepts_n_params_in_scientific_notation() -> None:
    card = {"n_layer": 2, "n_head": 4, "n_head_kv": 2, "head_dim": 16, "n_embd": 64, "n_ff": 128,
            "n_vocab": 32, "n_params": "1.24e9"}
    matrix = parse_matrix(matrix_with(models={"tiny": {"path": "x-{quant}", "card": card}}), "m")
    assert matrix.models["tiny"].card is not None
    assert matrix.models["tiny"].card.n_params == 1_240_000_000
    assert matrix.models["tiny"].path_for("Q2_K") == Path("x-Q2_K")


# --- malformed files through the CLI: exit 2 and exactly one line ------------------------------

CLI_CASES = {
    "not_yaml.yaml": " line 4: not valid YAML (expected ',' or ']', but got ':')",
    "not_mapping.yaml": ' a matrix must be a mapping of keys, got ["just", "a list"]',
    "wrong_type.yaml": ' axes.n_ctx[2]: "big" is not an integer (allowed: integers >= 1)',
    "unknown_key.yaml": " repetition: unknown key (allowed: " + ", ".join(TOP_KEYS) + ")",
    "unknown_axis_key.yaml": " axes.thread: unknown key (allowed: " + ", ".join(AXES) + ")",
    "exclude_unknown_axis.yaml": " exclude[0].thread: unknown axis (axes of this matrix: build, "
                                 "model, quant, n_ctx, kv, threads)",
    "empty_axis.yaml": " axes.quant: empty list (an axis needs at least one value)",
    "unknown_kv.yaml": ' axes.kv[1]: unknown KV cache type "q3_0" (allowed: '
                       + ", ".join(KV_TYPES) + ")",
    "unknown_quant.yaml": ' axes.quant[1]: unknown quant "Q4_K_X" (allowed: '
                          + ", ".join(QUANTS) + ")",
    "threads_zero.yaml": " axes.threads[1]: 0 is out of range (allowed: integers >= 1)",
    "undeclared_model.yaml": ' axes.model[1]: model "phi" is not declared in models '
                             "(declared: tiny)",
    "device_and_compute_device.yaml": " axes: gives both device and compute_device (device is "
                                      "the old name of compute_device): keep compute_device "
                                      "only",
    "include_incomplete.yaml": " include[0]: matches no combination, so it adds one, but leaves "
                               "axis 'build' unset (a new combination sets every axis of the "
                               "matrix: build, model, quant, n_ctx, kv, threads)",
}


def test_every_malformed_case_file_has_an_expected_message() -> None:
    assert sorted(CLI_CASES) == sorted(p.name for p in BAD.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_malformed_matrix_ends_in_one_line_and_exit_2(name: str) -> None:
    path = BAD / name
    result = CliRunner().invoke(main, ["plan", str(path), "--memory", "4GiB"])
    assert result.exit_code == 2, result.output
    assert result.output == f"Error: {path}:{CLI_CASES[name]}\n"
    assert "Traceback" not in result.output


def test_missing_matrix_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["plan", str(tmp_path / "nope.yaml"), "--memory", "4GiB"])
    assert result.exit_code == 2
    expected = f"Error: {tmp_path / 'nope.yaml'}: cannot read (No such file or directory)\n"
    assert result.output == expected


# --- shipped matrices and their schema ---------------------------------------------------------


def test_smoke_matrix_is_small_and_uses_the_tiny_ladder() -> None:
    matrix = load_matrix(REPO / "matrices" / "smoke.yaml")
    cells = expand(matrix)
    assert len(cells) == 8 and matrix.repetitions == 2
    assert {c.quant for c in cells} == {"Q8_0", "Q4_K_M"}
    assert {(c.type_k, c.n_ctx) for c in cells} == {
        ("f16", 256), ("f16", 512), ("q8_0", 256), ("q8_0", 512)}
    assert matrix.models["tiny"].ladder == "tiny"


def test_nightly_matrix_covers_the_ladder_contexts_caches_and_threads() -> None:
    matrix = load_matrix(REPO / "matrices" / "nightly.yaml")
    cells = expand(matrix)
    assert {c.quant for c in cells} == {"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K"}
    assert {c.n_ctx for c in cells} == {512, 1024, 2048, 4096, 8192}
    assert {c.type_k for c in cells} == {"f16", "q8_0", "q4_0"}
    assert {c.threads for c in cells} == {2, 4, 6, 8}
    assert {c.n_depth for c in cells if c.n_ctx == 8192} == {4096}
    assert not [c for c in cells if c.type_k == "q4_0" and c.quant in ("Q8_0", "Q6_K")]
    assert len({c.cell_id for c in cells}) == len(cells)
    card = matrix.models["llama-3.2-1b"].card
    assert card is not None and (card.n_layer, card.n_head_kv, card.head_dim) == (16, 8, 64)


def test_an_older_matrix_s_device_axis_is_read_as_compute_device(tmp_path: Path) -> None:
    """Matrices written before the axis was named compute_device give the same cells."""
    text = (REPO / "matrices" / "gpu.yaml").read_text()
    assert "\n  compute_device: " in text
    old = tmp_path / "gpu-old.yaml"
    old.write_text(text.replace("\n  compute_device: ", "\n  device: ") + "exclude:\n"
                   "  - {device: none, n_gpu_layers: half}\n")
    current, older = load_matrix(REPO / "matrices" / "gpu.yaml"), load_matrix(old)
    assert older.axes["compute_device"] == current.axes["compute_device"] == ("none", "Vulkan0")
    half = sorted({c.n_gpu_layers for c in expand(current)})[-1]  # -1 (all) sorts first
    kept = [c.cell_id for c in expand(current)
            if (c.compute_device, c.n_gpu_layers) != ("none", half)]
    assert [c.cell_id for c in expand(older)] == kept
    assert len(kept) < len(expand(current))  # the old name's exclude rule removed cells


def test_a_rule_that_names_an_axis_by_both_names_is_one_line() -> None:
    rule = {"device": "none", "compute_device": "none"}
    with pytest.raises(ConfigError) as error:
        parse_matrix(matrix_with(compute_device=["none", "Vulkan0"], exclude=[rule]), "m.yaml")
    assert str(error.value) == ("m.yaml: exclude[0]: gives both device and compute_device "
                                "(device is the old name of compute_device): keep "
                                "compute_device only")


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((REPO / "matrices" / "matrix.schema.json").read_text())
    return schema


def test_schema_agrees_with_the_loader() -> None:
    schema = _schema()
    assert list(schema["properties"]) == list(TOP_KEYS)
    assert list(schema["properties"]["axes"]["properties"]) == list(AXES)
    quant = schema["properties"]["axes"]["properties"]["quant"]["oneOf"][0]
    assert quant["enum"] == list(QUANTS)
    kv_pair = schema["properties"]["axes"]["properties"]["kv"]["oneOf"][0]["oneOf"][1]
    assert kv_pair["properties"]["type_k"]["enum"] == list(KV_TYPES)
    require = schema["properties"]["require"]
    assert list(require["properties"]) == list(REQUIRE_KEYS)
    assert require["additionalProperties"] is False


def test_require_keeps_what_the_matrix_asks_and_defaults_to_nothing() -> None:
    assert parse_matrix(matrix_with(), "m").require == Requirements()
    matrix = parse_matrix(matrix_with(require={"screen_on": True, "battery_saver": False}), "m")
    assert matrix.require == Requirements(screen_on=True, battery_saver=False)
    assert matrix.require.items() == [("screen_on", True), ("battery_saver", False)]


def test_a_require_block_validates_against_the_schema() -> None:
    data = matrix_with(require={"screen_on": True, "charging": False, "doze": False})
    jsonschema.validate(data, _schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(matrix_with(require={"screen_on": "yes"}), _schema())


@pytest.mark.parametrize("name", ["smoke.yaml", "nightly.yaml", "engines-phone.yaml"])
def test_shipped_matrices_validate_against_the_schema(name: str) -> None:
    data = yaml.safe_load((REPO / "matrices" / name).read_text())
    jsonschema.validate(data, _schema())


def test_fill_depth_puts_the_workload_at_the_end_of_a_full_context(tmp_path: Path) -> None:
    path = tmp_path / "fill.yaml"
    path.write_text(
        "name: fill\naxes:\n  build: [b]\n  model: [m]\n  quant: [Q4_K_M]\n"
        "  n_ctx: [256, 1024]\nmodels:\n  m: {ladder: tiny}\n"
        "workload: {n_prompt: 32, n_gen: 16, n_depth: fill}\n"
    )
    cells = expand(load_matrix(path))
    assert sorted((c.n_ctx, c.n_depth) for c in cells) == [(256, 208), (1024, 976)]


def test_load_mode_and_cache_are_axes_that_keep_older_cells_ids() -> None:
    plain = expand(parse_matrix(matrix_with(mmap=[True, False]), "m.yaml"))
    named = expand(parse_matrix(matrix_with(load_mode=["mmap", "none", "dio"]), "m.yaml"))
    # mmap true/false and load_mode mmap/none are the same cells, ids included
    assert [c.cell_id for c in plain] == [c.cell_id for c in named if c.load_mode != "dio"]
    dio = [c for c in named if c.load_mode == "dio"]
    assert dio and all(not c.mmap and c.resolved_load_mode == "dio" for c in dio)
    cold = expand(parse_matrix(matrix_with(cache=["cold", "warm"]), "m.yaml"))
    assert {c.cache for c in cold} == {"cold", "warm"}
    assert not {c.cell_id for c in cold} & {c.cell_id for c in expand(parse_matrix(BASE, "m"))}


def test_mmap_and_load_mode_together_and_unknown_knob_values_are_refused() -> None:
    with pytest.raises(ConfigError, match="declare mmap or load_mode, not both"):
        parse_matrix(matrix_with(mmap=[True], load_mode=["dio"]), "m.yaml")
    with pytest.raises(ConfigError, match='unknown cache state "hot"'):
        parse_matrix(matrix_with(cache=["hot"]), "m.yaml")
    with pytest.raises(ConfigError, match='unknown load_mode "lazy"'):
        parse_matrix(matrix_with(load_mode=["lazy"]), "m.yaml")


def test_a_cache_knob_on_an_engine_that_cannot_honour_it_is_one_line_exit_2(
        tmp_path: Path) -> None:
    engine = tmp_path / "mlc.yaml"
    engine.write_text('name: mlc\nargv: ["{binary}", "--config", "mlc.json"]\n'
                      "output: {format: regex, gen_tps: 'decode ([0-9.]+)'}\n")
    data = matrix_with(engine=[str(engine)], cache=["cold"])
    path = tmp_path / "cold.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["plan", str(path), "--memory", "1GiB"])
    assert result.exit_code == 2
    assert "axes.cache" in result.output and "cannot honour a cache knob" in result.output
    assert len(result.output.strip().splitlines()) == 1
