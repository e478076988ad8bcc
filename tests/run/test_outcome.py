"""Each trial gets exactly one outcome; the rules in order of precedence."""

from __future__ import annotations

from harness.run.outcome import OOM_SIGNALS, Observation, classify, oom_signals
from harness.units import MIB

APP_KILL = ("12-01 10:00:01.000  512  512 I lowmemorykiller: Kill 'com.whatsapp' (3141), "
            "uid 10123, oom_score_adj 900 to free 120000kB rss, 0kB swap; reason: min "
            "watermark is breached")


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
    assert line in (result.evidence or "")
    assert result.signals == ("sigkill", "lmkd_named_engine")


def test_kernel_oom_without_an_lmkd_line_for_the_engine_is_oom_killed_with_its_signals() -> None:
    """A stock phone: lmkd killed apps, then the kernel took the engine and logged nothing."""
    obs = Observation(exit_code=137, peak_rss_bytes=27 * MIB, memory_limit_bytes=28 * MIB,
                      pressure_full_us=180_000, lmkd_app_kills=(APP_KILL,))
    result = classify(obs)
    assert result.outcome == "oom_killed"
    assert result.signals == ("sigkill", "vm_hwm_near_available", "memory_pressure",
                              "lmkd_killed_apps")
    evidence = result.evidence or ""
    assert "exit 137 (SIGKILL) without a timeout" in evidence
    assert "27.0 MiB = 96% of the 28.0 MiB available at the start" in evidence
    assert "stalled 180 ms" in evidence
    assert "com.whatsapp" in evidence and "lmkd killed 1 other process(es)" in evidence
    assert "lmkd_killed_apps" in (result.error or "")


def test_each_memory_signal_alone_makes_a_sigkill_an_oom() -> None:
    for obs in (Observation(exit_code=137, pressure_full_us=1),
                Observation(exit_code=137, lmkd_app_kills=(APP_KILL,)),
                Observation(exit_code=137, peak_rss_bytes=90, memory_limit_bytes=100)):
        assert classify(obs).outcome == "oom_killed", obs


def test_memory_signals_without_a_sigkill_do_not_make_an_oom() -> None:
    result = classify(Observation(exit_code=0, complete_records=1, pressure_full_us=5000,
                                  lmkd_app_kills=(APP_KILL,)))
    assert result.outcome == "ok"
    assert result.signals == ("memory_pressure", "lmkd_killed_apps")  # stored, not a verdict


def test_a_sigkill_by_our_own_timeout_is_no_oom_signal() -> None:
    obs = Observation(exit_code=137, timed_out=True, pressure_full_us=10)
    assert classify(obs).outcome == "timeout"
    assert oom_signals(obs) == ("memory_pressure",)


def test_a_reboot_during_the_trial_is_device_lost_with_the_reboot_recorded() -> None:
    result = classify(Observation(exit_code=None, device_lost=True, rebooted=True,
                                  peak_rss_bytes=95, memory_limit_bytes=100))
    assert result.outcome == "device_lost"
    assert result.signals == ("vm_hwm_near_available", "reboot")
    assert "rebooted" in (result.error or "") and "kernel OOM" in (result.error or "")
    assert "boot id changed" in (result.evidence or "")
    plain = classify(Observation(exit_code=None, device_lost=True, rebooted=True))
    assert plain.error == "the phone rebooted during the trial" and plain.signals == ("reboot",)


def test_signal_names_are_the_documented_ones() -> None:
    assert OOM_SIGNALS == ("sigkill", "vm_hwm_near_available", "memory_pressure",
                           "lmkd_killed_apps", "lmkd_named_engine", "reboot")


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


def test_missing_results_after_a_clean_exit_is_a_parse_error_with_the_last_lines() -> None:
    result = classify(Observation(exit_code=0, complete_records=0,
                                  stderr_tail="[stdout]\nusage: tool -m MODEL"))
    assert result.outcome == "crashed"
    assert result.error is not None and result.error.startswith("parse_error: ")
    assert result.evidence == "[stdout]\nusage: tool -m MODEL"


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
