"""Gate specs and the rule deciding when a gate fails a build."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.analysis.compare import Comparison
from harness.analysis.gates import Gate, all_passed, evaluate_gates, parse_gate, parse_gates
from harness.errors import ConfigError


def comparison(ratio: float, low: float, high: float, verdict: str, **kw: object) -> Comparison:
    base = Comparison(
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        p_value=0.001,
        p_adjusted=0.001,
        cliffs_delta=-1.0,
        cv_baseline=0.02,
        cv_candidate=0.02,
        n_baseline=10,
        n_candidate=10,
        throttled_baseline=0,
        throttled_candidate=0,
        higher_is_better=True,
        noise=0.03,
        verdict=verdict,  # type: ignore[arg-type]
        reason="test",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "gate"),
    [
        ("tg_tps:-3%", Gate("tg_tps", 0.03, "decrease")),
        ("pp_tps:-5%", Gate("pp_tps", 0.05, "decrease")),
        ("peak_pss:+5%", Gate("peak_pss", 0.05, "increase")),
        ("ttft:+10%", Gate("ttft", 0.10, "increase")),
        (" tg_tps:-2.5% ", Gate("tg_tps", 0.025, "decrease")),
        ("tg_tps:-0%", Gate("tg_tps", 0.0, "decrease")),
    ],
)
def test_parse_valid_specs(spec: str, gate: Gate) -> None:
    parsed = parse_gate(spec)
    assert parsed.metric == gate.metric
    assert parsed.direction == gate.direction
    assert parsed.limit == pytest.approx(gate.limit)
    assert parse_gate(parsed.spec) == parsed


@pytest.mark.parametrize(
    "spec", ["tg_tps", "tg_tps:3%", "tg_tps:-3", ":-3%", "tg_tps:-x%", "tg tps:-3%", "tg_tps:-100%"]
)
def test_bad_specs_name_the_spec_and_the_allowed_form(spec: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_gate(spec)
    message = str(err.value)
    assert repr(spec) in message
    assert "\n" not in message
    assert "tg_tps:-3%" in message


def test_parse_gates_fails_on_the_first_bad_one() -> None:
    assert len(parse_gates(["tg_tps:-3%", "peak_pss:+5%"])) == 2
    with pytest.raises(ConfigError, match="'nope'"):
        parse_gates(["tg_tps:-3%", "nope"])


def test_threshold_and_beyond() -> None:
    drop, rise = parse_gate("tg_tps:-3%"), parse_gate("peak_pss:+5%")
    assert drop.threshold == pytest.approx(0.97)
    assert rise.threshold == pytest.approx(1.05)
    assert drop.beyond(0.96) and not drop.beyond(0.98)
    assert rise.beyond(1.06) and not rise.beyond(1.04)


GATE = parse_gate("tg_tps:-3%")


@pytest.mark.parametrize(
    ("cell", "passed"),
    [
        # regression with the estimate beyond the limit
        (comparison(0.95, 0.93, 0.975, "regression"), False),
        # regression but the gate is looser than the estimate
        (comparison(0.975, 0.96, 0.99, "regression"), True),
        # unstable (e.g. high CV) but the whole interval is beyond the limit
        (comparison(0.90, 0.85, 0.95, "unstable", causes=("high_cv",)), False),
        # too few repetitions: the interval means nothing, the gate does not fire on it
        (comparison(0.90, 0.85, 0.95, "unstable", causes=("too_few_reps",)), True),
        # estimate beyond but not a regression verdict and the interval reaches back
        (comparison(0.96, 0.92, 1.01, "unstable", causes=("straddles_band",)), True),
        (comparison(1.10, 1.05, 1.15, "improvement"), True),
        (comparison(1.00, 0.99, 1.01, "same"), True),
        (comparison(float("nan"), float("nan"), float("nan"), "unstable"), True),
    ],
)
def test_decrease_gate_rule(cell: Comparison, passed: bool) -> None:
    [result] = evaluate_gates([GATE], {"tg_tps": {"cell": cell}})
    assert result.passed is passed
    assert result.key == "cell"
    assert result.comparison is cell
    assert ("failed" in result.message) is not passed


def test_increase_gate_on_memory() -> None:
    gate = parse_gate("peak_pss:+5%")
    grew = comparison(1.08, 1.06, 1.10, "regression", higher_is_better=False)
    shrank = comparison(0.90, 0.88, 0.92, "improvement", higher_is_better=False)
    results = evaluate_gates([gate], {"peak_pss": {"grew": grew, "shrank": shrank}})
    assert [(r.key, r.passed) for r in results] == [("grew", False), ("shrank", True)]
    assert not all_passed(results)


def test_unknown_metric_is_a_config_error_and_empty_metric_passes_with_a_note() -> None:
    with pytest.raises(ConfigError, match="metric 'tg_tsp' was not compared"):
        evaluate_gates([parse_gate("tg_tsp:-3%")], {"tg_tps": {}})
    [result] = evaluate_gates([GATE], {"tg_tps": {}})
    assert result.passed and result.key is None
    assert "no cells" in result.message
    assert all_passed([result])
