"""The output check's pure parts: the comparison and its tolerance, the command line, the knob,
the validity gate."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from pathlib import Path

import pytest
from analysis.factory import trial as make_trial

from harness.cell import Cell
from harness.errors import ConfigError
from harness.matrix import CHECK_PROMPT, CHECK_TOKENS, OutputCheckPolicy, parse_matrix
from harness.run import outputcheck
from harness.run.outputcheck import Reference, Status, agreed_tokens, compare, judge
from harness.run.validity import validate

ECHO = b"<s> The capital of France is"
PIECES = (b" Paris", b".", b" It", b" is", b" a", b" city", b" of", b" light")
REF = Reference("ref-under-test", ECHO, PIECES)


def output(pieces: tuple[bytes, ...], echo: bytes = ECHO) -> str:
    """What the generator prints (the prompt's pieces, the continuation, a newline) as a device
    shell hands it back: UTF-8 decoded, invalid bytes replaced."""
    return (echo + b"".join(pieces) + b"\n").decode("utf-8", errors="replace")


def diverged_at(index: int) -> tuple[bytes, ...]:
    """The reference's pieces with the one at ``index`` (and everything after) changed."""
    return (*PIECES[:index], b" WRONG", *PIECES[index:])


def test_the_same_continuation_agrees_on_every_token() -> None:
    verdict = compare(REF, output(PIECES), min_agree=len(PIECES))
    assert verdict.status is Status.MATCH
    assert (verdict.agreed, verdict.reference_tokens, verdict.agreement) == (
        len(PIECES), len(PIECES), 1.0)
    assert verdict.reference == REF.identity


@pytest.mark.parametrize("index", range(len(PIECES)))
def test_the_shared_prefix_is_counted_in_reference_tokens(index: int) -> None:
    assert agreed_tokens(PIECES, output(diverged_at(index))[len(ECHO.decode()):]) == index


def test_a_late_divergence_within_the_tolerance_is_a_match() -> None:
    """Rounding parts two correct builds late: past min_agree tokens the rest may differ."""
    need = len(PIECES) // 2
    verdict = compare(REF, output(diverged_at(need)), min_agree=need)
    assert verdict.status is Status.MATCH
    assert verdict.agreed == need


def test_an_early_divergence_is_a_mismatch_that_shows_both_texts() -> None:
    need = len(PIECES) // 2
    verdict = compare(REF, output(diverged_at(need - 1)), min_agree=need)
    assert verdict.status is Status.MISMATCH
    assert verdict.agreed == need - 1
    assert verdict.agreement == pytest.approx((need - 1) / len(PIECES))
    assert verdict.detail is not None
    assert "WRONG" in verdict.detail and PIECES[need - 1].decode() in verdict.detail
    assert f"needs {need}" in verdict.detail


def test_a_wrong_first_token_is_a_mismatch_with_nothing_agreed() -> None:
    verdict = compare(REF, output(diverged_at(0)), min_agree=1)
    assert (verdict.status, verdict.agreed) == (Status.MISMATCH, 0)


def test_a_reference_that_ended_early_needs_all_its_tokens() -> None:
    """At an end-of-generation token the reference has fewer tokens than min_agree: all must
    agree, and the build stopping there too is a match."""
    short = dataclasses.replace(REF, pieces=PIECES[:2], ended=True)
    assert compare(short, output(PIECES[:2]), min_agree=len(PIECES)).status is Status.MATCH
    assert compare(short, output(PIECES[:1]), min_agree=len(PIECES)).status is Status.MISMATCH


def test_output_without_the_prompt_echo_is_a_mismatch() -> None:
    verdict = compare(REF, output(PIECES, echo=b"<bos>Another prompt"), min_agree=1)
    assert (verdict.status, verdict.agreed) == (Status.MISMATCH, 0)
    assert verdict.detail is not None and "echo" in verdict.detail


def test_a_character_split_over_two_tokens_still_compares() -> None:
    """Byte-fallback pieces: after the first of two the text holds half a character."""
    euro = "€".encode()
    ref = dataclasses.replace(REF, pieces=(euro[:1], euro[1:], b"!"))
    verdict = judge(ref, 0, output(ref.pieces), "", min_agree=3)
    assert (verdict.status, verdict.agreed) == (Status.MATCH, 3)
    other = judge(ref, 0, output((b"$", b"!")), "", min_agree=1)
    assert (other.status, other.agreed) == (Status.MISMATCH, 0)


def test_invalid_utf8_compares_as_the_device_shell_decodes_it() -> None:
    """A random model may emit a lone continuation byte; the shell turns it into U+FFFD."""
    ref = dataclasses.replace(REF, pieces=(b" a", b"\xb7", b" b"))
    assert judge(ref, 0, output(ref.pieces), "", min_agree=3).agreed == 3


def test_a_failed_or_silent_generator_is_an_error_not_a_verdict() -> None:
    crashed = judge(REF, 139, "", "line 1\nSegmentation fault\n", min_agree=1)
    assert crashed.status is Status.ERROR
    assert crashed.detail is not None and "139" in crashed.detail
    assert "Segmentation fault" in crashed.detail
    assert judge(REF, 0, "  \n", "", min_agree=1).status is Status.ERROR


def test_the_verdict_fills_the_trial_columns() -> None:
    verdict = compare(REF, output(diverged_at(1)), min_agree=2)
    columns = verdict.columns()
    assert columns["output_check"] == "mismatch"
    assert columns["output_agreed_tokens"] == 1
    assert columns["output_reference_tokens"] == len(PIECES)
    assert columns["output_reference"] == REF.identity
    record = make_trial(**columns)  # every key is a TrialRecord column
    assert record.output_check_detail == verdict.detail


# --- the command line ---------------------------------------------------------------------------

HOSTILE = "it's \"$(touch pwned)\"; `touch pwned2` && echo $HOME * \\ \n -n 9"


def make_cell(**knobs: object) -> Cell:
    base = Cell(build="b", model="tiny", quant="Q8_0", n_ctx=512, type_k="f16", type_v="f16",
                threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=256,
                n_ubatch=128, n_prompt=64, n_gen=128)
    return dataclasses.replace(base, **knobs)  # type: ignore[arg-type]


KNOB_WORDS = ["-ctk", "f16", "-ctv", "f16", "-fa", "off", "-dev", "none", "-ngl", "0"]


def test_the_command_quotes_every_word() -> None:
    command = outputcheck.generator_command("/d/b x/bin/harness-generate", "/d/m y.gguf",
                                            HOSTILE, CHECK_TOKENS, lib_dir="/d/b x/lib")
    assert shlex.split(command) == [
        "env", "LD_LIBRARY_PATH=/d/b x/lib", "/d/b x/bin/harness-generate", "-m", "/d/m y.gguf",
        "-n", str(CHECK_TOKENS), *KNOB_WORDS, HOSTILE]


def test_the_generator_runs_with_the_trial_s_knobs() -> None:
    """The check's computation is the trial's: KV types, attention, threads, batch sizes, device
    and layers (llama.cpp's own default, -ngl 99 on any device, would move a CPU cell's check
    onto a GPU build's GPU)."""
    cell = make_cell(type_k="q8_0", type_v="q4_0", flash_attn="on", threads=3, n_batch=64,
                     n_ubatch=16, compute_device="Vulkan0", n_gpu_layers=-1)
    knobs = outputcheck.CheckKnobs.of(cell)
    words = shlex.split(outputcheck.generator_command("b", "m", "p", 4, knobs=knobs))
    assert words[words.index("-n") + 2:-1] == [
        "-ctk", "q8_0", "-ctv", "q4_0", "-fa", "on", "-dev", "Vulkan0", "-ngl", "-1", "-t", "3",
        "-b", "64", "-ub", "16"]
    assert knobs.text() == ("KV q8_0/q4_0, flash attention on, 3 threads, batch 64/16, device "
                            "Vulkan0 with -1 layers")
    cpu = shlex.split(outputcheck.generator_command("b", "m", "p", 4))
    assert cpu[cpu.index("-ngl") + 1] == "0" and cpu[cpu.index("-dev") + 1] == "none"
    # the reference computes with flash attention wherever llama.cpp must: a quantised V cache
    assert knobs.reference_flash
    assert outputcheck.CheckKnobs(type_v="q8_0", flash_attn="auto").reference_flash
    assert not outputcheck.CheckKnobs(flash_attn="auto").reference_flash
    # two trials that differ only in what the check does not run with share one check
    assert outputcheck.CheckKnobs.of(make_cell(quant="Q8_0")) == outputcheck.CheckKnobs.of(
        make_cell(quant="Q4_0"))


def test_a_shell_running_the_command_passes_the_prompt_as_one_word(tmp_path: Path) -> None:
    """What reaches the device's shell: the prompt arrives as one argument, nothing expands."""
    script = tmp_path / "harness-generate"
    script.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    script.chmod(0o755)
    command = outputcheck.generator_command(str(script), "m.gguf", HOSTILE, CHECK_TOKENS)
    done = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    assert done.stdout.split("\0")[:-1] == ["-m", "m.gguf", "-n", str(CHECK_TOKENS),
                                             *KNOB_WORDS, HOSTILE]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_the_command_needs_a_token() -> None:
    with pytest.raises(ValueError):
        outputcheck.generator_command("b", "m", "p", 0)


# --- the matrix knob ------------------------------------------------------------------------------

BASE = {"name": "m", "axes": {"build": ["b"], "model": ["tiny"], "quant": ["Q4_K_M"],
                              "n_ctx": [256]},
        "models": {"tiny": {"ladder": "tiny"}}, "workload": {"n_prompt": 8, "n_gen": 8}}


def parsed(value: object) -> OutputCheckPolicy:
    return parse_matrix({**BASE, "output_check": value}, "m.yaml").output_check


def test_the_check_is_on_by_default_with_half_the_tokens_to_agree() -> None:
    policy = parse_matrix(dict(BASE), "m.yaml").output_check
    assert policy == OutputCheckPolicy()
    assert (policy.enabled, policy.tokens, policy.prompt) == (True, CHECK_TOKENS, CHECK_PROMPT)
    assert policy.min_agree == CHECK_TOKENS // 2


def test_the_knob_turns_off_and_sets_its_figures() -> None:
    assert parsed(False).enabled is False
    assert parsed(True) == OutputCheckPolicy()
    policy = parsed({"tokens": 10, "prompt": "Once upon a time"})
    assert (policy.tokens, policy.prompt, policy.min_agree) == (10, "Once upon a time", 5)
    assert parsed({"tokens": 10, "min_agree": 10}).min_agree == 10


@pytest.mark.parametrize(("value", "key"), [
    ({"tokens": 0}, "output_check.tokens"),
    ({"tokens": 4, "min_agree": 5}, "output_check.min_agree"),
    ({"prompt": "-n 3"}, "output_check.prompt"),
    ({"prompt": ""}, "output_check.prompt"),
    ({"prompt": 3}, "output_check.prompt"),
    ({"tokenz": 3}, "output_check.tokenz"),
    ("yes", "output_check"),
])
def test_a_bad_knob_is_one_line_naming_the_key(value: object, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        parsed(value)
    message = str(error.value)
    assert message.startswith(f"m.yaml: {key}: ") and "\n" not in message


# --- the validity gate ----------------------------------------------------------------------------


def test_a_mismatch_marks_the_speed_invalid_naming_the_reference() -> None:
    verdict = compare(REF, output(diverged_at(0)), min_agree=1)
    checked = validate(make_trial(**verdict.columns()))
    assert checked.valid is False
    assert checked.invalid_reason is not None
    assert checked.invalid_reason.startswith(f"output mismatch against {REF.identity}: ")
    assert checked.tg_tps is not None  # the speed stays, marked invalid


@pytest.mark.parametrize("verdict", [
    compare(REF, output(PIECES), min_agree=1),
    outputcheck.not_checked("engine has no generator"),
    judge(REF, 1, "", "boom", min_agree=1),
])
def test_match_not_checked_and_error_leave_the_trial_valid(
        verdict: outputcheck.Verdict) -> None:
    checked = validate(make_trial(**verdict.columns()))
    assert (checked.valid, checked.invalid_reason) == (True, None)


def test_a_mismatch_is_one_validity_reason_whatever_the_build_wrote() -> None:
    verdict = compare(REF, output((b" Lyon; it", b" is; a")), min_agree=4)
    assert verdict.status == Status.MISMATCH
    reason = outputcheck.invalid_reason(verdict.status, REF.identity, verdict.detail)
    assert reason is not None and reason.startswith("output mismatch against ref-under-test: ")
    assert "; " not in reason  # the gates' reasons are "; "-joined
    assert outputcheck.invalid_reason(Status.MATCH, REF.identity, "x") is None
