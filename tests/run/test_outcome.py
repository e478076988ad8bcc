"""Each trial gets exactly one outcome; the rules in order of precedence."""

from __future__ import annotations

from harness.run.outcome import Observation, classify


def test_clean_exit_with_all_records_is_ok() -> None:
    assert classify(Observation(exit_code=0, complete_records=1)).outcome == "ok"


def test_lost_device_wins_over_everything_else() -> None:
    obs = Observation(exit_code=137, device_lost=True, lmk_line="Kill 'llama-bench'")
    assert classify(obs).outcome == "device_lost"


def test_timeout_is_reported_as_timeout_not_crash() -> None:
    assert classify(Observation(exit_code=137, timed_out=True)).outcome == "timeout"


def test_sigkill_with_lmk_line_is_oom_killed_with_the_line_as_evidence() -> None:
    line = "Kill 'llama-bench' (4242), uid 2000, oom_score_adj 0 to free 1000kB rss"
    result = classify(Observation(exit_code=137, lmk_line=line))
    assert result.outcome == "oom_killed"
    assert result.evidence == line


def test_sigkill_at_the_memory_limit_without_a_line_is_oom_killed() -> None:
    obs = Observation(exit_code=137, peak_rss_bytes=950, memory_limit_bytes=1000)
    assert classify(obs).outcome == "oom_killed"


def test_sigkill_far_from_the_limit_is_a_crash() -> None:
    obs = Observation(exit_code=137, peak_rss_bytes=100, memory_limit_bytes=1000)
    result = classify(obs)
    assert result.outcome == "crashed"
    assert "SIGKILL" in (result.error or "")


def test_segfault_names_the_signal_and_keeps_stderr() -> None:
    result = classify(Observation(exit_code=139, stderr_tail="ggml_abort\n"))
    assert result.outcome == "crashed"
    assert result.error == "killed by SIGSEGV"
    assert result.evidence == "ggml_abort"


def test_plain_non_zero_exit_is_a_crash_with_the_code() -> None:
    assert classify(Observation(exit_code=1)).error == "exit code 1"


def test_missing_results_after_a_clean_exit_is_a_crash() -> None:
    result = classify(Observation(exit_code=0, complete_records=0))
    assert result.outcome == "crashed"


def test_engine_fallback_is_flagged_not_stored_as_ok() -> None:
    obs = Observation(exit_code=0, complete_records=1, mismatch="type_v q4_0 asked, f16 ran")
    result = classify(obs)
    assert result.outcome == "engine_mismatch"
    assert result.error == "type_v q4_0 asked, f16 ran"


def test_a_binary_the_phone_cannot_execute_is_an_abi_mismatch_not_a_crash() -> None:
    mksh = classify(Observation(
        exit_code=1, stderr_tail="/system/bin/sh: ./llama-bench: not executable: 64-bit ELF file"))
    assert mksh.outcome == "abi_mismatch"
    assert "not executable" in (mksh.evidence or "")
    dash = classify(Observation(exit_code=126, stderr_tail="sh: 1: exec: ./x: Exec format error"))
    assert dash.outcome == "abi_mismatch"
    # the same words from an engine that ran and failed are its own crash
    ran = classify(Observation(exit_code=1, complete_records=1,
                               stderr_tail="load: not executable: 64-bit ELF file"))
    assert ran.outcome == "crashed"
