"""The report's KV cache table: cached `harness quality --kv` cells of the ladders the trials used,
one table per engine build, with the repetition figures, escaped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from analysis.factory import cell, trial, write

from harness.analysis.kv_loss import KV_QUALITY_FILE, Continuation, EngineBuild, KvCell
from harness.analysis.kv_loss_measure import write_cache
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report

SHA_Q8, SHA_Q4 = "a" * 64, "b" * 64
BUILD = EngineBuild("0.3.36", "0c1e57098b", "CPU : AVX2 = 1", kv_rotation=True)


def _cell(kv: str, kl: float, loop: int, build: EngineBuild = BUILD,
          text: str = "pydoc-topics@<b>x</b>") -> KvCell:
    return KvCell(quant="Q8_0", sha256=SHA_Q8, kv=kv, type_k=kv.split("/")[0],
                  type_v=kv.split("/")[-1], depth=6144, window=256, kl=kl, kl_max=kl * 7,
                  top1=1 - kl, ppl=9.87 + kl, gen_tokens=256, repeated_4gram=kl * 2,
                  longest_loop=loop, text=text, build=build,
                  measured_at="2026-12-04T10:00:00+00:00", ladder_shas=(SHA_Q8, SHA_Q4))


def test_the_kv_table_shows_each_builds_cells_with_repetition_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    folder = cache / "models" / "gemma3-270m-test"
    folder.mkdir(parents=True)
    unrotated = dataclasses.replace(BUILD, kv_rotation=False)
    write_cache(folder / KV_QUALITY_FILE, {
        "1": _cell("f16", 0.0, 0), "2": _cell("q4_0", 0.04321, 17),
        "3": dataclasses.replace(_cell("q8_0/q4_0", 0.02468, 5), continuations=(
            Continuation(0, 256, 0.62, 40), Continuation(900, 256, 0.04, 2),
            Continuation(1800, 256, 0.55, 30))),  # three places, two loop
        "4": _cell("q4_0", 0.13579, 41, build=unrotated),
        "5": dataclasses.replace(_cell("q4_0", 0.5, 1), sha256="c" * 64,
                                 ladder_shas=()),  # another model's: not shown
    })
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    # the trials used the Q4 file of the ladder: its KV cells (measured with Q8_0) are shown
    write(tmp_path / "results", [trial(cell(model="gemma3", quant="Q4_K_M"),
                                       model_sha256=SHA_Q4)])
    data = build_report_data(ReportOptions(tmp_path / "results"))
    assert [(r.kv, r.build.endswith("rotation on")) for r in data.kv_quality] == [
        ("q4_0", False), ("f16", True), ("q8_0/q4_0", True), ("q4_0", True)]
    assert all(r.model == "gemma3" for r in data.kv_quality)
    html = render_report(data)
    section = html[html.index('id="quality"'):]
    section = section[:section.index("</section>")]
    assert section.count("<table>") == 2 and "rotation off" in section
    assert "0.04321" in section and "17 of 256" in section and "8.6%" in section  # 2 x 0.04321
    assert "0.13579" in section and "41 of 256" in section and "0.50000" not in section
    assert "pydoc-topics@&lt;b&gt;x&lt;/b&gt;" in section and "<b>x</b>" not in section
    # each row says how many of its continuations loop: one place for a cell of one, 2 of 3
    assert ">2 of 3<" in section and ">0 of 1<" in section and ">1 of 1<" not in section
    assert "No quality measured" not in section


def test_an_unreadable_or_newer_kv_cache_is_left_out_with_a_warning_not_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The report and recommend read the KV cells beside the models; one file they cannot read
    (broken, or written by a newer harness) must not stop them: it is named on stderr."""
    from harness.analysis.kv_loss_measure import cached_kv_cells

    cache = tmp_path / "cache"
    good, broken, newer = (cache / "models" / name for name in ("a", "b", "c"))
    for folder in (good, broken, newer):
        folder.mkdir(parents=True)
    write_cache(good / KV_QUALITY_FILE, {"1": _cell("q4_0", 0.04321, 17)})
    (broken / KV_QUALITY_FILE).write_text("{not json")
    (newer / KV_QUALITY_FILE).write_text('{"schema_version": 99, "cells": {}}')
    assert [c.kl for c in cached_kv_cells(cache)] == [0.04321]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("warning: KV quality left out: ") for line in err)
    assert str(broken / KV_QUALITY_FILE) in err[0]
    assert "schema 99 is from a newer harness" in err[1]
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    write(tmp_path / "results", [trial(cell(model="gemma3", quant="Q8_0"), model_sha256=SHA_Q8)])
    data = build_report_data(ReportOptions(tmp_path / "results"))
    assert [r.kl for r in data.kv_quality] == [0.04321]
