"""The output check end to end: real builds, the host reference, a virtual phone, the commands.

host-release must agree with llama-cpp-python's greedy continuation, and so must host-slow (other
SIMD paths, same code) and arm64-release under qemu (another CPU's kernels); host-wrong (a planted
RMS-norm bug, tests/fixtures_builds.py) must not. On a virtual phone the planted build's trials
are stored with their speed but invalid, and ``harness recommend`` never names it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.artifacts.gguf_info import file_sha256
from harness.cli import main
from harness.matrix import CHECK_PROMPT, CHECK_TOKENS, OutputCheckPolicy
from harness.run import outputcheck, reference
from harness.run.outputcheck import Status

pytestmark = pytest.mark.slow

POLICY = OutputCheckPolicy()
QUANTS = ("Q4_K_M", "Q8_0")
MATRIX = f"""name: output-check
axes:
  build: [host-release, host-wrong]
  model: [tiny]
  quant: [{", ".join(QUANTS)}]
  n_ctx: [256]
  threads: [1]
  n_batch: [256]
  n_ubatch: [128]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 16, n_gen: 32}}
repetitions: 2
output_check: {{tokens: {CHECK_TOKENS}, prompt: {json.dumps(CHECK_PROMPT)}}}
cooldown: {{max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}}
timeout: {{trial_s: 120}}
"""


def generate(build: Build, model: Path, *, runner: tuple[str, ...] = ()) -> outputcheck.Verdict:
    """llama-simple of ``build`` on this host, judged against the reference."""
    ref = reference.greedy_reference(model, file_sha256(model), POLICY.prompt, POLICY.tokens)
    argv = [*runner, str(build.binary(outputcheck.GENERATOR)), "-m", str(model), "-n",
            str(POLICY.tokens), POLICY.prompt]
    done = subprocess.run(argv, capture_output=True, timeout=600, check=False)
    # decoded as a device shell decodes (harness.device.local): invalid UTF-8 replaced
    stdout, stderr = (data.decode("utf-8", errors="replace") for data in (done.stdout, done.stderr))
    return outputcheck.judge(ref, done.returncode, stdout, stderr, POLICY.min_agree)


@pytest.mark.parametrize("quant", QUANTS)
def test_correct_host_builds_match_and_the_planted_bug_does_not(
    host_build: Build, slow_build: Build, wrong_build: Build, tiny_ladder: dict[str, Path],
    quant: str,
) -> None:
    model = tiny_ladder[quant]
    for build in (host_build, slow_build):
        verdict = generate(build, model)
        assert verdict.status is Status.MATCH, (build.name, verdict.detail)
        assert verdict.agreed == verdict.reference_tokens  # no rounding apart on this model
    wrong = generate(wrong_build, model)
    assert wrong.status is Status.MISMATCH, wrong.detail
    assert wrong.agreed is not None and wrong.agreed < POLICY.min_agree


def test_the_arm64_build_under_qemu_matches(
    arm64_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if qemu is None:
        pytest.fail("qemu-aarch64 is not installed (the arm64 virtual phones need it too)")
    verdict = generate(arm64_build, tiny_ladder["Q4_K_M"], runner=(qemu,))
    assert verdict.status is Status.MATCH, verdict.detail
    assert verdict.agreed is not None and verdict.agreed >= POLICY.min_agree


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_wrong_build_is_measured_marked_invalid_and_never_recommended(
    sim_home: Path, tmp_path: Path, host_build: Build, wrong_build: Build,
    tiny_ladder: dict[str, Path],
) -> None:
    assert host_build.path.parent == wrong_build.path.parent
    matrix = tmp_path / "output-check.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    summary = cli("run", str(matrix), "--devices", "sim:1", "--results", str(results),
                  "--builds", str(host_build.path.parent))
    cells = len(QUANTS) * 2  # two builds
    assert summary["trials_by_outcome"] == {"ok": 2 * cells}
    trials = store.read_table(results, "trials")
    right = trials[trials["build_id"] == "host-release"]
    wrong = trials[trials["build_id"] == "host-wrong"]

    assert set(right["output_check"]) == {"match"}
    assert right["valid"].all()
    assert (right["output_agreed_tokens"] >= POLICY.min_agree).all()
    assert set(right["output_reference"]) == {reference.identity()}

    assert set(wrong["output_check"]) == {"mismatch"}
    assert not wrong["valid"].any()
    assert (wrong["output_agreed_tokens"] < POLICY.min_agree).all()
    for reason in wrong["invalid_reason"]:
        assert reason.startswith(f"output mismatch against {reference.identity()}: ")
    assert (wrong["tg_tps"] > 0).all() and (wrong["pp_tps"] > 0).all()  # the speed is kept
    # one check per (build, model file) on the phone: the same figure on both repetitions
    per_group = trials.groupby(["build_id", "quant"])["output_agreement"].nunique()
    assert (per_group == 1).all()

    serial = summary["devices"][0]["serial"]
    picks = cli("recommend", "--results", str(results), "--device", serial,
                "--memory", "4GiB")
    assert picks["picks"], picks
    assert {p["build_id"] for p in picks["picks"]} == {"host-release"}
    # the planted build is turned away, per configuration, because none of its trials counts
    turned_away = {r["config_id"] for r in picks["rejected"] if r["build_id"] == "host-wrong"}
    assert turned_away == set(wrong["config_id"])
    for rejected in picks["rejected"]:
        if rejected["build_id"] == "host-wrong":
            assert rejected["reason_code"] == "invalid"
            assert "output mismatch against" in rejected["reason"]

    # the report's validity table names the planted build and the reason, not host-release
    page = tmp_path / "report.html"
    made = CliRunner().invoke(main, ["report", "--results", str(results), "-o", str(page)],
                              catch_exceptions=False)
    assert made.exit_code == 0, made.output
    html = page.read_text()
    section = html[html.index('<section id="validity">'):]
    section = section[:section.index("</section>")]
    assert f"output mismatch against {reference.identity()}" in section
    assert "host-wrong" in section and "host-release" not in section
    # ... and the speed it showed, marked invalid
    assert "tg t/s (invalid)" in section
    for _, group in wrong.groupby("config_id"):
        assert f"{group['tg_tps'].median():.1f}" in section, section[-1500:]
