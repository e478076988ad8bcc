"""``dumpsys thermalservice`` as phones indent it (tabs, spaces or nothing), with the stale cache
before the current readings, the AIDL HAL's connection line, BCL sensors of voltage and percent
types that are not temperatures, and float noise (issue 47). Built here from the layout of
frameworks/base's ThermalManagerService dump; the figures are made up."""

from __future__ import annotations

import pytest

from harness.android import cpu_mitigation_active, hottest_temperature, parse_thermalservice


def _dump(indent: str) -> str:
    lines = [
        "IsStatusOverride: false", "ThermalEventListeners:", f"{indent}callbacks: 1",
        "Thermal Status: 2", "Cached temperatures:",
        f"{indent}Temperature{{mValue=61.0, mType=0, mName=cpu0, mStatus=3}}",
        "HAL Ready: true", "HAL connection:", f"{indent}ThermalHAL AIDL 1  connected: yes",
        "Current temperatures from HAL:",
        f"{indent}Temperature{{mValue=44.200000762939453, mType=0, mName=cpu0, mStatus=2}}",
        f"{indent}Temperature{{mValue=3600.0, mType=6, mName=vbat, mStatus=0}}",
        f"{indent}Temperature{{mValue=87.0, mType=8, mName=soc, mStatus=0}}",
        f"{indent}Temperature{{mValue=39.099998474121094, mType=3, mName=skin, mStatus=0}}",
        "Current cooling devices from HAL:",
        f"{indent}CoolingDevice{{mValue=2, mType=2, mName=thermal-cpufreq-4}}",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("indent", ["\t", "    ", ""], ids=["tab", "spaces", "none"])
def test_every_indentation_reads_the_current_section_alone(indent: str) -> None:
    service = parse_thermalservice(_dump(indent))
    assert service is not None and service.status == 2 and service.hal_ready is True
    assert service.hal_connection == "ThermalHAL AIDL 1  connected: yes"
    assert [t.name for t in service.temperatures] == ["cpu0", "vbat", "soc", "skin"]
    hottest = hottest_temperature(service.temperatures)  # the stale 61.0 is not read
    assert hottest is not None and hottest.name == "cpu0"
    assert hottest.value == pytest.approx(44.2, abs=1e-6)  # float noise kept as a float
    assert cpu_mitigation_active(service)  # a CPU cooling device engaged at status 2
