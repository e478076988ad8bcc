"""A phone's storage limit in reads a second (``storage.read_iops``): parsed from its profile
and carried to its config and properties (the kernel enforcing it: test_cgroup_memory.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli.sim import _memory_words
from harness.errors import ConfigError
from harness.profiles import parse_profile
from harness.virtual import cgroups
from harness.virtual.control import PhoneInfo
from harness.virtual.provision import config_from_profile, provision

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "devices" / "virtual" / "small-ram.yaml"


def _small(**storage: Any) -> dict[str, Any]:
    data = yaml.safe_load(SMALL.read_text())
    data["storage"] = {**data["storage"], **storage}
    return data


def test_read_iops_is_parsed_and_a_bad_one_is_one_line_naming_the_key() -> None:
    assert parse_profile(_small(read_iops=2500), "small.yaml").storage_read_iops == 2500
    assert parse_profile(_small(), "small.yaml").storage_read_iops is None  # as before
    for bad in (0, -5, 2.5, True, "fast"):
        with pytest.raises(ConfigError, match=r"^small.yaml: storage.read_iops must be a "
                                              r"positive whole number"):
            parse_profile(_small(read_iops=bad), "small.yaml")


def test_the_simulated_model_says_it_does_not_throttle_reads_a_second_either(
        tmp_path: Path) -> None:
    only_iops = _small(read_iops=2500)
    del only_iops["storage"]["read_mb_s"]
    config = config_from_profile(parse_profile(only_iops, "small.yaml"), "small-1")
    assert config.storage_read_iops == 2500
    done = provision(config, tmp_path / "small-1", requested="simulated")
    assert done.storage_note.startswith("not throttled: the simulated memory model")
    assert "ro.harness.storage_read_iops" not in done.props


def test_parse_serviced_reads_the_device_s_read_count() -> None:
    text = "7:3 Read 1200\n7:3 Write 7\n7:3 Total 1207\n254:0 Read 9\nTotal 1216\n"
    assert cgroups.parse_serviced(text, "7:3") == 1200
    assert cgroups.parse_serviced(text, "254:0") == 9
    assert cgroups.parse_serviced(text, "8:0") is None and cgroups.parse_serviced("", "7:3") is None


def test_sim_status_names_the_reads_a_second_beside_the_speed() -> None:
    phone = PhoneInfo("small-1", "127.0.0.1:5600", 5600, 1, "small-ram", "Small-RAM", "/x", 5601,
                      memory_model="cgroup", storage_read_mb_s=100.0, storage_read_iops=6667)
    assert "storage: 100 MB/s, 6667 reads/s" in _memory_words(phone)
    plain = _memory_words(dataclasses.replace(phone, storage_read_iops=None))
    assert "storage: 100 MB/s" in plain and "reads/s" not in plain
