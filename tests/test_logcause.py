"""A started process that fails at start: its log's cause line reaches the user's terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import DeviceError
from harness.logcause import cause, failed_at_start
from harness.testing.adbserver import start_adb_server

TRACEBACK = """\
Traceback (most recent call last):
  File "/x/daemon.py", line 260, in <module>
    sys.exit(main())
harness.errors.DeviceError: virtual phones need qemu-aarch64; install it: apt-get install qemu-user
"""


def test_a_traceback_gives_its_error_line_and_ours_without_the_class() -> None:
    assert cause(TRACEBACK) == \
        "virtual phones need qemu-aarch64; install it: apt-get install qemu-user"
    foreign = TRACEBACK.rsplit("\n", 2)[0] + "\nOSError: [Errno 98] Address already in use\n"
    assert cause(foreign) == "OSError: [Errno 98] Address already in use"


def test_without_a_traceback_the_last_line_and_nothing_for_an_empty_log() -> None:
    assert cause("starting\n\nerror: could not install *smartsocket* listener\n  \n") == \
        "error: could not install *smartsocket* listener"
    assert cause("\n \n") == ""


def test_only_this_launchs_lines_count(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_text("OSError: an earlier launch's failure\n")
    offset = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("ValueError: this one\n")
    assert failed_at_start("it exited", log, offset) == \
        f"it exited: ValueError: this one (log: {log})"
    assert failed_at_start("it exited", log, log.stat().st_size) == f"it exited; see {log}"


def test_an_adb_server_that_exits_at_start_says_why(tmp_path: Path) -> None:
    adb = tmp_path / "adb"
    adb.write_text("#!/bin/sh\necho 'adb: usage: unknown option -P' >&2\nexit 1\n")
    adb.chmod(0o755)
    with pytest.raises(DeviceError) as raised:
        start_adb_server(tmp_path / "home", binary=str(adb))
    assert "exited at start: adb: usage: unknown option -P (log: " in str(raised.value)
