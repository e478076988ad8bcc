"""lmkd's lines follow the order the kernel killed the apps in, not the order their exits were
seen (issue 51): the oom reaper frees a victim's memory at once, so the kernel can take the next
app before the first has finished exiting, and on a loaded host the second exit is seen first.

The apps' balloons here are real processes (``sleep``) killed in a chosen order, so the daemon's
reaping runs on real exits with no kernel OOM needed.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.profiles import find_profile
from harness.virtual import logstore
from harness.virtual import phone as phone_module
from harness.virtual.phone import App, Phone
from harness.virtual.provision import config_from_profile
from harness.virtual.sandbox import Sandbox

MUSIC = App("com.example.music", 10101, 700, 20 * 1024)
CACHED = App("com.example.cached", 10124, 900, 30 * 1024)


@pytest.fixture
def phone(tmp_path: Path) -> Iterator[Phone]:
    config = config_from_profile(find_profile("midrange-8gb"), "lmkd-1")
    made = Phone(Sandbox(tmp_path / "lmkd-1"), config)
    made.sandbox.state.mkdir(parents=True)
    made.apps = []
    for app in (MUSIC, CACHED):
        process = subprocess.Popen(["sleep", "60"])
        made.apps.append(App(app.name, app.uid, app.adj, app.rss_kb, pid=process.pid))
        made._balloons[app.name] = process
    try:
        yield made
    finally:
        for process in made._balloons.values():
            process.kill()
            process.wait()


def _kill(phone: Phone, name: str) -> None:
    process = phone._balloons[name]
    process.send_signal(signal.SIGKILL)
    process.wait()  # its exit is seen: poll() now says so


def _kills(phone: Phone) -> list[str]:
    return [e.message.split("'")[1] for e in logstore.read(phone.sandbox.state)
            if e.tag == "lowmemorykiller"]


def test_an_app_killed_first_but_seen_exiting_second_is_still_logged_first(
        phone: Phone) -> None:
    _kill(phone, MUSIC.name)  # the lower app's exit is seen while the higher one still exits
    phone._reap_apps()
    assert _kills(phone) == []  # music waits for cached, which the kernel must have taken first
    assert [a.pid != 0 for a in phone.apps] == [True, True]
    _kill(phone, CACHED.name)
    phone._reap_apps()
    assert _kills(phone) == [CACHED.name, MUSIC.name]
    assert [a.pid for a in phone.apps] == [0, 0] and phone._balloons == {}


def test_apps_seen_dead_in_the_kernels_order_are_logged_at_once(phone: Phone) -> None:
    _kill(phone, CACHED.name)
    phone._reap_apps()
    assert _kills(phone) == [CACHED.name]
    _kill(phone, MUSIC.name)
    phone._reap_apps()
    assert _kills(phone) == [CACHED.name, MUSIC.name]


def test_a_lower_app_whose_higher_one_never_exits_is_logged_after_the_wait(
        phone: Phone, monkeypatch: pytest.MonkeyPatch) -> None:
    _kill(phone, MUSIC.name)
    phone._reap_apps()
    assert _kills(phone) == []
    monkeypatch.setattr(phone_module, "REAP_WAIT_S", 0.0)
    phone._reap_apps()  # the wait is over: what went is logged, the live app stays
    assert _kills(phone) == [MUSIC.name]
    assert {a.name: a.pid != 0 for a in phone.apps} == {MUSIC.name: False, CACHED.name: True}
