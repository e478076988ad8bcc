"""The kept-state check's command and answer (``harness.farm.phonestate``, pure parts)."""

from __future__ import annotations

from harness.device.base import DeviceFacts
from harness.farm.phonestate import check_command, live_facts, parse_check, still_valid

PATHS = ["/data/local/tmp/harness/models/ab/m.gguf", "/data/local/tmp/harness/x y/bin"]
ANSWER = """@@harness:boot_id
3f1c2b9a-0d4e-4c1b-9a7e-5b6c7d8e9f01
@@harness:meminfo
MemTotal:        8000000 kB
MemAvailable:    5000000 kB
@@harness:df
Filesystem     1K-blocks    Used Available Use% Mounted on
/dev/block/dm-5  100000   40000     60000  40% /data
@@harness:stat
1 4096 1700000000 1700000001 77
"""


def test_the_check_is_one_command_with_every_path_quoted() -> None:
    command = check_command(PATHS)
    assert "'/data/local/tmp/harness/x y/bin'" in command
    assert command.count("stat -c") == 1 and "; ;" not in command
    assert "stat" not in check_command([])  # nothing recorded yet: boot id and facts only


def test_the_answer_gives_the_boot_the_live_facts_and_the_stamps_by_position() -> None:
    check = parse_check(ANSWER, PATHS)
    assert check.boot_id == "3f1c2b9a-0d4e-4c1b-9a7e-5b6c7d8e9f01"
    assert (check.total_ram_kb, check.available_ram_kb, check.free_storage_kb) == (
        8000000, 5000000, 60000)
    assert check.stamps == {PATHS[1]: "4096 1700000000 1700000001 77"}  # the first is gone
    facts = live_facts(DeviceFacts("s", "adb", model="m", available_ram_kb=1, free_storage_kb=2),
                       check)
    assert (facts.model, facts.available_ram_kb, facts.free_storage_kb) == ("m", 5000000, 60000)


def test_only_files_with_the_stamp_recorded_at_their_check_stay_valid() -> None:
    files = {"a": ("sha-a", "1 2 3 4"), "b": ("sha-b", "5 6 7 8"), "c": ("sha-c", "9 9 9 9")}
    stamps = {"a": "1 2 3 4", "b": "5 6 8 8"}  # b rewritten (ctime), c gone
    assert still_valid(files, stamps) == {"a": "sha-a"}
