"""The report's quality table: the cached `harness quality` scores of the files the trials used,
beside their measured speed and peak; and llama.cpp's own KV figure in the memory table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis.factory import cell, trial, write

from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report

SHA_Q8, SHA_Q2 = "a" * 64, "b" * 64


def _quality_file(cache: Path) -> None:
    folder = cache / "models" / "gemma3-270m-test"
    folder.mkdir(parents=True)
    scores = [dict(quant=q, sha256=sha, kl=kl, kl_max=kl * 10, top1=top1, positions=1725,
                   reference="F16", ppl=ppl, text="gemma-terms@<i>x</i>")
              for q, sha, kl, top1, ppl in (("Q8_0", SHA_Q8, 0.0045, 0.972, 12.797),
                                            ("Q2_K", SHA_Q2, 0.8162, 0.600, 30.547))]
    (folder / "quality.json").write_text(json.dumps({"schema_version": 1, "scores": scores}))


def test_the_quality_table_joins_scores_to_trials_by_file(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    _quality_file(cache)
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    q8, q2 = cell(model="gemma3", quant="Q8_0"), cell(model="gemma3", quant="Q2_K")
    write(tmp_path / "results", [
        trial(q8, rep=0, model_sha256=SHA_Q8, tg_tps=40.0, predicted_kv_bytes=9 << 20,
              kv_reported_bytes=9 << 20),
        trial(q8, rep=1, model_sha256=SHA_Q8, tg_tps=44.0),
        trial(q2, rep=0, model_sha256=SHA_Q2, tg_tps=50.0),
        trial(cell(model="gemma3", quant="Q4_K_M"), model_sha256="c" * 64),  # no score: left out
    ])
    data = build_report_data(ReportOptions(tmp_path / "results"))
    rows = {r.quant: r for r in data.quality}
    assert list(rows) == ["Q8_0", "Q2_K"]  # most bits first
    assert rows["Q8_0"].tg_tps == 42.0 and rows["Q8_0"].ppl == 12.797
    assert rows["Q2_K"].kl == 0.8162
    html = render_report(data)
    assert 'id="quality"' in html and "30.547" in html and "0.81620" in html
    assert "gemma-terms@&lt;i&gt;x&lt;/i&gt;" in html and "<i>x</i>" not in html
    kv = [c for c in data.memory_cells if c.kv_error is not None]
    assert kv and kv[0].kv_error == 0.0


def test_without_scores_the_section_says_how_to_get_them(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "empty"))
    write(tmp_path / "results", [trial()])
    html = render_report(build_report_data(ReportOptions(tmp_path / "results")))
    assert "No quality measured for these models" in html
