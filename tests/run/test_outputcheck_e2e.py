"""The output check end to end: real builds, the host reference, a virtual phone, the commands.

host-release must agree with llama-cpp-python's greedy continuation, with an f16 KV cache and
with a q4_0 V cache under flash attention, and so must host-slow (other SIMD paths, same code)
and arm64-release under qemu (another CPU's kernels). host-wrong (a bug planted only in the
quantised-V path of flash attention, tests/fixtures_builds.py) agrees with an f16 cache and must
not with q4_0 V: the check runs with each trial's own settings. On a virtual phone the planted
build's q4_0-V trials are stored with their speed but invalid, its f16 trials stay valid, and
``harness recommend`` names only configurations that passed.
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
F16 = outputcheck.CheckKnobs(threads=1)
Q4_V = outputcheck.CheckKnobs(type_v="q4_0", flash_attn="on", threads=1, n_batch=8, n_ubatch=4)
MATRIX = f"""name: output-check
axes:
  build: [host-release, host-wrong]
  model: [tiny]
  quant: [Q8_0]
  kv: [f16, f16/q4_0]
  flash_attn: [on]
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


def generate(build: Build, model: Path, knobs: outputcheck.CheckKnobs = F16, *,
             runner: tuple[str, ...] = ()) -> outputcheck.Verdict:
    """harness-generate of ``build`` on this host with ``knobs``, judged against the reference
    with the same KV types and attention."""
    ref = reference.greedy_reference(model, file_sha256(model), POLICY.prompt, POLICY.tokens,
                                     type_k=knobs.type_k, type_v=knobs.type_v,
                                     flash_attn=knobs.reference_flash)
    argv = [*runner, str(build.binary(outputcheck.GENERATOR)), "-m", str(model), "-n",
            str(POLICY.tokens), *knobs.argv(), POLICY.prompt]
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
        for knobs in (F16, Q4_V):
            verdict = generate(build, model, knobs)
            assert verdict.status is Status.MATCH, (build.name, knobs, verdict.detail)
            assert verdict.agreed == verdict.reference_tokens  # no rounding apart on this model
    # the planted bug is in the quantised-V path only: an f16 cache never reaches it
    right = generate(wrong_build, model, F16)
    assert right.status is Status.MATCH, right.detail
    wrong = generate(wrong_build, model, Q4_V)
    assert wrong.status is Status.MISMATCH, wrong.detail
    assert wrong.agreed is not None and wrong.agreed < POLICY.min_agree


def test_the_arm64_build_under_qemu_matches(
    arm64_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if qemu is None:
        pytest.fail("qemu-aarch64 is not installed (the arm64 virtual phones need it too)")
    for knobs in (F16, Q4_V):
        verdict = generate(arm64_build, tiny_ladder["Q4_K_M"], knobs, runner=(qemu,))
        assert verdict.status is Status.MATCH, (knobs, verdict.detail)
        assert verdict.agreed is not None and verdict.agreed >= POLICY.min_agree


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_check_follows_each_trial_so_only_the_planted_path_is_invalid_and_recommended_away(
    sim_home: Path, tmp_path: Path, host_build: Build, wrong_build: Build,
    tiny_ladder: dict[str, Path],
) -> None:
    assert host_build.path.parent == wrong_build.path.parent
    matrix = tmp_path / "output-check.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    summary = cli("run", str(matrix), "--devices", "sim:1", "--results", str(results),
                  "--builds", str(host_build.path.parent))
    cells = 2 * 2  # two builds x two KV caches
    assert summary["trials_by_outcome"] == {"ok": 2 * cells}
    trials = store.read_table(results, "trials")
    planted = (trials["build_id"] == "host-wrong") & (trials["type_v"] == "q4_0")
    right, wrong = trials[~planted], trials[planted]

    assert set(right["output_check"]) == {"match"}
    assert right["valid"].all()
    assert (right["output_agreed_tokens"] >= POLICY.min_agree).all()
    assert set(right["output_reference"]) == {reference.identity()}
    # each verdict says the settings it was made with: the trial's own
    for row in trials.itertuples():
        assert f"KV {row.type_k}{'' if row.type_k == row.type_v else '/' + row.type_v}, " \
            "flash attention on, 1 threads, batch 256/128, device none with 0 layers" \
            in row.output_check_detail, row.output_check_detail

    assert set(wrong["output_check"]) == {"mismatch"}
    assert not wrong["valid"].any()
    assert (wrong["output_agreed_tokens"] < POLICY.min_agree).all()
    for reason in wrong["invalid_reason"]:
        assert reason.startswith(f"output mismatch against {reference.identity()}: ")
    assert (wrong["tg_tps"] > 0).all() and (wrong["pp_tps"] > 0).all()  # the speed is kept
    # one check per (build, model file, settings) on the phone: one figure for both repetitions
    per_group = trials.groupby(["build_id", "type_v"])["output_agreement"].nunique()
    assert (per_group == 1).all()

    serial = summary["devices"][0]["serial"]
    for flags in ((), ("--require-output-check",)):
        picks = cli("recommend", "--results", str(results), "--device", serial,
                    "--memory", "4GiB", *flags)
        # host-wrong's f16 configuration passed its own check and may be picked; its q4_0-V
        # configuration is turned away, because none of its trials counts
        assert {(p["build_id"], p["type_v"]) for p in picks["picks"]} == {
            ("host-release", "f16"), ("host-release", "q4_0"), ("host-wrong", "f16")}
        assert {p["output_check"] for p in picks["picks"]} == {"checked"}
        turned_away = [r for r in picks["rejected"] if r["build_id"] == "host-wrong"]
        assert {r["config_id"] for r in turned_away} == set(wrong["config_id"])
        for rejected in turned_away:
            assert rejected["reason_code"] == "invalid"
            assert "output mismatch against" in rejected["reason"]

    # the report counts the check's states and its validity table names the planted path only
    page = tmp_path / "report.html"
    made = CliRunner().invoke(main, ["report", "--results", str(results), "-o", str(page)],
                              catch_exceptions=False)
    assert made.exit_code == 0, made.output
    html = page.read_text()
    assert "checked: 6</span><span class=\"crashed\">mismatch: 2</span>" in html
    section = html[html.index('<section id="validity">'):]
    section = section[:section.index("</section>")]
    assert "6 checked and matched, 2 mismatched (invalid), 0 errored (no verdict), 0 unchecked" \
        in section
    assert f"output mismatch against {reference.identity()}" in section
    assert "host-wrong" in section and "host-release" not in section
    # ... and the speed it showed, marked invalid
    assert "tg t/s (invalid)" in section
    for _, group in wrong.groupby("config_id"):
        assert f"{group['tg_tps'].median():.1f}" in section, section[-1500:]
