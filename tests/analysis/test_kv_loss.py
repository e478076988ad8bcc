"""KV quality's pure parts: options, places in the text, window statistics, loop figures, builds
kept apart, recommend's KV loss."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from harness.analysis.kv_loss import (
    LOOP_THRESHOLD,
    Continuation,
    EngineBuild,
    KvCell,
    KvEvidence,
    KvLoss,
    KvType,
    atoi,
    by_build,
    cell_key,
    check_context,
    check_depths,
    combined_kl,
    kv_delta,
    loop_summary,
    loops,
    one_build,
    parse_depths,
    parse_kv_types,
    position_offsets,
    position_tokens,
    repetition_figures,
    rotation_enabled,
    text_repetition,
    window_stats,
)
from harness.errors import ConfigError

BUILD = EngineBuild("0.3.36", "0c1e570", "CPU : AVX2 = 1", kv_rotation=True)


def _cell(kv: str = "q4_0", depth: int = 6144, kl: float = 0.1, sha: str = "w8",
          build: EngineBuild = BUILD, when: str = "2026-12-04T10:00:00+00:00",
          ladder: tuple[str, ...] = ("w8", "w4", "w16")) -> KvCell:
    k, _, v = kv.partition("/")
    return KvCell(quant="Q8_0", sha256=sha, kv=kv, type_k=k, type_v=v or k, depth=depth,
                  window=256, kl=kl, kl_max=kl * 5, top1=0.9, ppl=10.0, gen_tokens=256,
                  repeated_4gram=0.1, longest_loop=4, text="pydoc-topics@12345678", build=build,
                  measured_at=when, ladder_shas=ladder)


def test_kv_types_parse_single_and_k_v_pairs_in_order_without_duplicates() -> None:
    kvs = parse_kv_types(["f16,q8_0", "q4_0", "Q8_0/q4_0", "q8_0"])
    assert kvs == (KvType("f16", "f16"), KvType("q8_0", "q8_0"), KvType("q4_0", "q4_0"),
                   KvType("q8_0", "q4_0"))
    assert [kv.label for kv in kvs] == ["f16", "q8_0", "q4_0", "q8_0/q4_0"]
    assert KvType("f32", "f16").lossless and not KvType("f16", "q8_0").lossless


@pytest.mark.parametrize("bad", ["q3_k", "q8_0/q2", "fp16", "q8_0/q4_0/f16", "/q4_0", ""])
def test_unknown_kv_types_are_a_config_error_naming_the_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="--kv"):
        parse_kv_types([bad])


def test_depths_parse_as_sorted_whole_numbers_of_at_least_one() -> None:
    assert parse_depths(["6144,512", "2048", "512"]) == (512, 2048, 6144)
    for bad in ("0", "-5", "6k"):
        with pytest.raises(ConfigError, match="--depth"):
            parse_depths([bad])


def test_a_depth_needs_a_whole_window_of_text_after_it() -> None:
    check_depths([100, 744], 1000, 256, "the text")  # 744 + 256 == 1000: fits exactly
    with pytest.raises(ConfigError, match=r"--depth 745: .* at most 744"):
        check_depths([100, 745], 1000, 256, "the text")


def test_several_places_need_room_for_windows_that_do_not_overlap() -> None:
    check_depths([500], 1000, 50, "--text t.txt", positions=10)  # 500 + 10 x 50 == 1000
    with pytest.raises(ConfigError, match=r"--depth 501: --text t.txt has 1000 tokens, too few "
                                          r"for that depth and 10 places .* at most 500, "
                                          r"fewer --positions or a longer --text"):
        check_depths([501], 1000, 50, "--text t.txt", positions=10)
    with pytest.raises(ConfigError, match="--positions 0"):
        check_depths([10], 1000, 50, "the text", positions=0)


def test_places_are_evenly_spaced_over_the_whole_text_at_least_a_window_apart() -> None:
    offsets = position_offsets(10_000, 4096, 256, 8)
    assert len(offsets) == 8 and offsets[0] == 0 and offsets[-1] == 10_000 - 4096 - 256
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert min(gaps) >= 256 and max(gaps) - min(gaps) <= 1
    tight = position_offsets(4096 + 8 * 256, 4096, 256, 8)  # just enough: a window apart
    assert [b - a for a, b in itertools.pairwise(tight)] == [256] * 7
    assert position_offsets(5000, 4096, 256, 1) == (0,)
    with pytest.raises(ValueError):
        position_offsets(4096 + 8 * 256 - 1, 4096, 256, 8)


def test_a_place_reads_bos_then_the_text_from_its_offset() -> None:
    tokens = [1, *range(100, 200)]  # BOS, then the text
    view = position_tokens(tokens, 30)
    depth = 10
    assert view[0] == 1 and view[1:depth] == tokens[31:30 + depth]
    assert view[depth] == tokens[30 + depth]  # the first token predicted / continued
    assert position_tokens(tokens, 0) == tokens


def test_a_continuation_loops_when_half_its_4grams_repeat() -> None:
    assert LOOP_THRESHOLD == 0.5
    assert loops(0.5) and loops(0.984) and not loops(0.49) and not loops(0.0)
    assert Continuation(0, 256, 0.9, 100).loops and not Continuation(0, 256, 0.1, 2).loops


def test_the_cells_figures_are_medians_of_its_continuations() -> None:
    runs = [Continuation(i * 10, n, share, loop) for i, (n, share, loop) in
            enumerate([(256, 0.9, 120), (256, 0.1, 2), (200, 0.3, 5), (256, 0.95, 126)])]
    assert repetition_figures(runs) == (pytest.approx(0.6), 5, 256)
    with pytest.raises(ValueError):
        repetition_figures([])


def test_loop_figures_sit_beside_f16s_paired_place_by_place() -> None:
    def cell(kv: str, shares: list[float]) -> KvCell:
        runs = tuple(Continuation(i * 100, 256, s, 1) for i, s in enumerate(shares))
        median = repetition_figures(runs)[0]
        return dataclasses.replace(_cell(kv), continuations=runs, repeated_4gram=median)

    f16 = cell("f16", [0.9, 0.0, 0.0, 0.0, 0.6, 0.1, 0.0, 0.0])
    q4 = cell("q4_0", [0.0, 0.9, 0.8, 0.7, 0.6, 0.1, 0.0, 0.0])
    summary = loop_summary(q4, f16)
    assert (summary["continuations"], summary["looping"], summary["loop_share"]) == (8, 4, 0.5)
    assert summary["median_repeated_4gram"] == pytest.approx(0.35)
    assert summary["f16"] == {"continuations": 8, "looping": 2, "loop_share": 0.25,
                              "median_repeated_4gram": pytest.approx(0.0)}
    assert summary["loops_where_f16_does_not"] == 3  # places 1, 2 and 3
    assert summary["f16_loops_where_this_does_not"] == 1  # place 0
    assert "f16" not in loop_summary(q4, None)


def test_the_text_itself_is_judged_in_stretches_as_long_as_a_continuation() -> None:
    text = [1, *range(100, 140), *([5, 6] * 20), *range(200, 240)]  # BOS, 40 + 40 + 40
    own = text_repetition(text, 40)
    assert (own.stretches, own.length, own.looping) == (3, 40, 1)
    assert own.median_repeated_4gram == 0.0
    assert text_repetition([1, 2, 3], 40).stretches == 0


def test_a_depth_and_what_follows_it_must_fit_the_trained_context() -> None:
    check_context([32_000], 256, 32_768)
    check_context([99_999], 256, 0)  # context unknown: not checked
    with pytest.raises(ConfigError, match=r"--depth 32513: .* at most 32512"):
        check_context([1024, 32_513], 256, 32_768)


def test_rotation_follows_llama_cpps_reading_of_the_environment_variable() -> None:
    assert rotation_enabled({})
    assert rotation_enabled({"LLAMA_ATTN_ROT_DISABLE": "0"})
    assert rotation_enabled({"LLAMA_ATTN_ROT_DISABLE": "yes"})  # atoi("yes") == 0
    assert not rotation_enabled({"LLAMA_ATTN_ROT_DISABLE": "1"})
    assert not rotation_enabled({"LLAMA_ATTN_ROT_DISABLE": " 2x"})
    assert (atoi("-3"), atoi("+7z"), atoi(""), atoi(None)) == (-3, 7, 0, 0)


def test_window_stats_are_zero_for_a_copy_and_match_the_closed_form_otherwise() -> None:
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(40, 11)).astype(np.float32)
    targets = [int(t) for t in rng.integers(0, 11, 40)]
    same = window_stats(ref, ref.copy(), targets, rows=7)
    assert np.allclose(same.kl, 0.0) and same.agree.all()
    cand = ref + rng.normal(scale=0.7, size=ref.shape).astype(np.float32)
    stats = window_stats(ref, cand, targets, rows=7)
    p = np.exp(ref - ref.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    q = np.exp(cand - cand.max(axis=1, keepdims=True))
    q /= q.sum(axis=1, keepdims=True)
    assert stats.kl == pytest.approx((p * np.log(p / q)).sum(axis=1), rel=1e-4)
    assert stats.nll == pytest.approx(-np.log(q[np.arange(40), targets]), rel=1e-4)
    assert stats.agree.tolist() == (p.argmax(1) == q.argmax(1)).tolist()
    with pytest.raises(ValueError):
        window_stats(ref, cand[:-1], targets)


def test_results_of_different_builds_or_rotation_settings_are_never_compared() -> None:
    unrotated = dataclasses.replace(BUILD, kv_rotation=False)
    other_commit = dataclasses.replace(BUILD, llama_cpp_commit="fffffff")
    a, b = _cell(kl=0.05), _cell(kl=0.2)
    assert kv_delta(a, b) == pytest.approx(0.15)
    for build in (unrotated, other_commit):
        with pytest.raises(ConfigError, match="not comparable"):
            kv_delta(a, _cell(build=build))
        with pytest.raises(ConfigError, match="not comparable"):
            one_build([a, b, _cell(build=build)])
    groups = by_build([a, _cell(build=unrotated), b])
    assert groups == {BUILD: [a, b], unrotated: [_cell(build=unrotated)]}


def test_cell_keys_change_with_the_build_the_rotation_and_every_setting() -> None:
    base = cell_key("w8", KvType("q4_0", "q4_0"), 6144, 256, 256, "t", BUILD)
    others = {
        cell_key("w4", KvType("q4_0", "q4_0"), 6144, 256, 256, "t", BUILD),
        cell_key("w8", KvType("q8_0", "q4_0"), 6144, 256, 256, "t", BUILD),
        cell_key("w8", KvType("q4_0", "q4_0"), 2048, 256, 256, "t", BUILD),
        cell_key("w8", KvType("q4_0", "q4_0"), 6144, 128, 256, "t", BUILD),
        cell_key("w8", KvType("q4_0", "q4_0"), 6144, 256, 64, "t", BUILD),
        cell_key("w8", KvType("q4_0", "q4_0"), 6144, 256, 256, "u", BUILD),
        cell_key("w8", KvType("q4_0", "q4_0"), 6144, 256, 256, "t",
                 dataclasses.replace(BUILD, kv_rotation=False)),
    }
    assert base not in others and len(others) == 7
    # the number of places changes the method's figures: 8 places never answer for 1
    assert cell_key("w8", KvType("q4_0", "q4_0"), 6144, 256, 256, "t", BUILD, 8) != base


def test_cells_survive_a_json_round_trip() -> None:
    cell = _cell()
    assert KvCell.from_json(cell.to_json()) == cell
    runs = (Continuation(0, 256, 0.98, 126), Continuation(700, 200, 0.01, 1))
    several = dataclasses.replace(cell, continuations=runs)
    assert KvCell.from_json(several.to_json()) == several
    assert several.looping == 1 and several.loop_share == 0.5


def test_a_schema_1_cell_reads_as_its_single_continuation() -> None:
    data = _cell().to_json()
    del data["continuations"]
    old = KvCell.from_json(data)
    assert old.runs == (Continuation(0, 256, 0.1, 4),) and old.looping == 0


def test_kv_loss_uses_the_nearest_depth_not_above_the_context() -> None:
    evidence = KvEvidence((_cell(depth=1024, kl=0.01), _cell(depth=4096, kl=0.04),
                           _cell(depth=8192, kl=0.09), _cell("q8_0", depth=4096, kl=0.001)))
    loss = evidence.loss("w8", "q4_0", "q4_0", 6000)
    assert loss is not None and (loss.kl, loss.depth) == (0.04, 4096)
    assert evidence.loss("w8", "q4_0", "q4_0", 8192).kl == 0.09  # type: ignore[union-attr]
    assert evidence.loss("w8", "q4_0", "q4_0", 1500).depth == 1024  # type: ignore[union-attr]
    shallow = evidence.loss("w8", "q4_0", "q4_0", 512)  # below every depth: the shallowest
    assert shallow is not None and shallow.depth == 1024 and "no depth" in shallow.describe()
    assert evidence.loss("w8", "q8_0", "q8_0", 6000).kl == 0.001  # type: ignore[union-attr]
    assert evidence.loss("w8", "q8_0", "q4_0", 6000) is None  # that pair was not measured


def test_lossless_kv_costs_nothing_and_unknown_weights_find_no_kv_cell() -> None:
    evidence = KvEvidence((_cell(),))
    assert evidence.loss(None, "f16", "f16", 4096) == KvLoss(0.0, "f16", None)
    assert evidence.loss(None, "q4_0", "q4_0", 8192) is None
    assert evidence.loss("not-in-any-ladder", "q4_0", "q4_0", 8192) is None


def test_kv_loss_falls_back_to_the_same_ladders_other_weights_and_says_so() -> None:
    evidence = KvEvidence((_cell(kl=0.3),))
    loss = evidence.loss("w4", "q4_0", "q4_0", 8192)
    assert loss is not None and loss.kl == 0.3 and loss.quant == "Q8_0"
    assert "with Q8_0 weights" in loss.describe()
    own = KvEvidence((_cell(kl=0.3), _cell(kl=0.5, sha="w4"))).loss("w4", "q4_0", "q4_0", 8192)
    assert own is not None and own.kl == 0.5 and own.quant is None


def test_kv_loss_takes_one_builds_cells_the_newest() -> None:
    old = dataclasses.replace(BUILD, kv_rotation=False)
    evidence = KvEvidence((_cell(depth=4096, kl=0.5, build=old, when="2026-12-01T00:00:00"),
                           _cell(depth=2048, kl=0.02, when="2026-12-04T00:00:00")))
    loss = evidence.loss("w8", "q4_0", "q4_0", 4096)
    # the newer build measured only 2048: its figure, not the older build's deeper one
    assert loss is not None and (loss.kl, loss.depth) == (0.02, 2048)


def test_the_combined_loss_is_the_sum_of_weight_and_kv_kl() -> None:
    assert combined_kl(0.004, KvLoss(0.03, "q4_0", 4096)) == pytest.approx(0.034)
    assert combined_kl(0.004, KvLoss(0.0, "f16", None)) == 0.004
    assert math.isfinite(combined_kl(0.0, KvLoss(0.0, "f16", None)))
