"""Names on the farm: device resources that Dask can carry, and the way back to the serial."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.farm.naming import (
    clean,
    device_resource,
    farm_phones,
    resource_map,
    serial_of,
    tag_resource,
    worker_name,
)


@pytest.mark.parametrize(("serial", "resource"), [
    ("127.0.0.1:5555", "device:127_0_0_1_5555"),
    ("emulator-5554", "device:emulator_5554"),
    ("R58M12ABCDE", "device:R58M12ABCDE"),
    ("adb-R58M._adb-tls-connect._tcp", "device:adb_R58M__adb_tls_connect__tcp"),
])
def test_device_resource_keeps_only_letters_digits_and_underscores(serial: str,
                                                                   resource: str) -> None:
    assert device_resource(serial) == resource
    kind, _, name = resource.partition(":")
    assert kind == "device" and name.replace("_", "").isalnum()


def test_a_cleaned_name_survives_the_dask_worker_command_line_parsing() -> None:
    # what `dask worker --resources` does with its argument (distributed/cli/dask_worker.py)
    text = f"{device_resource('10.0.0.7:5555')}=1 {tag_resource('host', 'lab-2.local')}=1"
    parsed = dict(pair.split("=") for pair in text.replace(",", " ").split())
    assert parsed == {"device:10_0_0_7_5555": "1", "host:lab_2_local": "1"}


def test_worker_name_keeps_the_serial_unchanged() -> None:
    name = worker_name("127.0.0.1:5555", "usb-host-2")
    assert name == "127.0.0.1:5555@usb-host-2"
    assert serial_of(name) == "127.0.0.1:5555"
    assert serial_of("tcp://127.0.0.1:40000") is None
    assert serial_of("@host") is None


def test_two_serials_that_clean_alike_cannot_share_a_run() -> None:
    assert resource_map(["a-1", "b"]) == {"a-1": "device:a_1", "b": "device:b"}
    with pytest.raises(ConfigError, match="both map to the Dask resource 'device:a_1'"):
        resource_map(["a-1", "a.1"])


def test_tags_must_have_a_plain_kind_and_a_value() -> None:
    assert tag_resource("soc", "SM8550 (Snapdragon)") == "soc:SM8550__Snapdragon_"
    with pytest.raises(ConfigError, match="letters and digits"):
        tag_resource("ra:ck", "a3")
    with pytest.raises(ConfigError, match="empty value"):
        tag_resource("rack", " ")
    assert clean(" x.y ") == "x_y"


def test_farm_phones_are_workers_named_after_a_serial_with_its_resource() -> None:
    workers = {
        "tcp://127.0.0.1:1": {"name": "127.0.0.1:5555@alpha",
                              "resources": {"device:127_0_0_1_5555": 1.0, "host:alpha": 1.0}},
        "tcp://127.0.0.1:2": {"name": "tcp://127.0.0.1:2", "resources": {}},  # a plain worker
        "tcp://127.0.0.1:3": {"name": "X@beta", "resources": {"device:Y": 1.0}},  # mismatch
    }
    assert farm_phones(workers) == {"127.0.0.1:5555": "127.0.0.1:5555@alpha"}
