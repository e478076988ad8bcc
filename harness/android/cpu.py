"""``/proc/cpuinfo`` and ``/sys/devices/system/cpu``: cores, clusters, frequencies.

Big/little topology comes from ``cpu_capacity`` (1024 = biggest; old EAS kernels keep it under
``topology/``) or, failing that, from each policy's ``cpuinfo_max_freq``. Part ids alone cannot
tell (Samsung Mongoose cores have implementer 0x53), and ``/proc/cpuinfo`` lists online cores only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.android._numbers import to_int

# (implementer, part) -> core name. ARM ids from the TRMs; the 0x51/0x53 ones are less certain.
_CORE_NAMES: dict[tuple[int, int], str] = {
    **{(0x41, part): name for part, name in {
        0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57",
        0xD08: "Cortex-A72", 0xD09: "Cortex-A73", 0xD0A: "Cortex-A75", 0xD0B: "Cortex-A76",
        0xD0D: "Cortex-A77", 0xD41: "Cortex-A78", 0xD44: "Cortex-X1", 0xD46: "Cortex-A510",
        0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD4D: "Cortex-A715", 0xD4E: "Cortex-X3",
        0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4",
    }.items()},
    (0x51, 0x800): "Kryo 2xx Gold", (0x51, 0x801): "Kryo 2xx Silver",
    (0x51, 0x802): "Kryo 3xx Gold", (0x51, 0x803): "Kryo 3xx Silver",
    (0x51, 0x804): "Kryo 4xx Gold", (0x51, 0x805): "Kryo 4xx Silver",
    (0x53, 0x001): "Exynos M1", (0x53, 0x002): "Exynos M3", (0x53, 0x003): "Exynos M4",
    (0x53, 0x004): "Exynos M5",
}


def core_name(implementer: int | None, part: int | None) -> str | None:
    """A marketing name for a known (implementer, part) pair, else None."""
    if implementer is None or part is None:
        return None
    return _CORE_NAMES.get((implementer, part))


@dataclass(frozen=True)
class CpuCore:
    """One ``processor`` block of ``/proc/cpuinfo``."""

    processor: int
    implementer: int | None
    part: int | None
    variant: int | None = None
    revision: int | None = None

    @property
    def name(self) -> str | None:
        return core_name(self.implementer, self.part)


@dataclass(frozen=True)
class CpuInfo:
    cores: tuple[CpuCore, ...]
    hardware: str | None = None


def _hex_or_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuInfo:
    """Cores of ``/proc/cpuinfo`` (online ones only); garbage gives no cores."""
    cores: list[CpuCore] = []
    current: dict[str, str] = {}
    hardware: str | None = None

    def flush() -> None:
        index = to_int(current.get("processor"))
        if index is not None:
            cores.append(CpuCore(
                processor=index,
                implementer=_hex_or_int(current.get("CPU implementer")),
                part=_hex_or_int(current.get("CPU part")),
                variant=_hex_or_int(current.get("CPU variant")),
                revision=_hex_or_int(current.get("CPU revision")),
            ))
        current.clear()

    for raw in text.splitlines():
        key, sep, value = raw.rstrip("\r").partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key == "processor":
            flush()
        if key == "Hardware":
            hardware = value
        current.setdefault(key, value)
    flush()
    return CpuInfo(cores=tuple(cores), hardware=hardware)


@dataclass(frozen=True)
class CpuFreq:
    """One CPU's frequency facts (kHz) and capacity; missing files read as None."""

    cpu: int
    cpuinfo_max_khz: int | None = None
    scaling_max_khz: int | None = None
    scaling_cur_khz: int | None = None
    capacity: int | None = None
    related_cpus: tuple[int, ...] = ()

    @property
    def capped(self) -> bool:
        """The policy's ceiling is below the hardware maximum (thermal or otherwise)."""
        return (self.scaling_max_khz is not None and self.cpuinfo_max_khz is not None
                and self.scaling_max_khz < self.cpuinfo_max_khz)


@dataclass(frozen=True)
class CpuTopology:
    """CPUs grouped into clusters, fastest cluster first."""

    cpus: tuple[CpuFreq, ...]
    clusters: tuple[tuple[int, ...], ...]

    @property
    def layout(self) -> str:
        """``"1+3+4"``: cluster sizes from the biggest cores to the smallest."""
        return "+".join(str(len(cluster)) for cluster in self.clusters)

    @property
    def big_cpus(self) -> tuple[int, ...]:
        """CPUs outside the slowest cluster (all of them on a homogeneous SoC)."""
        if len(self.clusters) <= 1:
            return tuple(c.cpu for c in self.cpus)
        return tuple(sorted(cpu for cluster in self.clusters[:-1] for cpu in cluster))

    @property
    def little_cpus(self) -> tuple[int, ...]:
        return self.clusters[-1] if len(self.clusters) > 1 else ()


_CPU_FILE = re.compile(r"/cpu(\d+)/(?:cpufreq/|topology/)?([a-z_]+)$")


def read_cpu_topology(files: Mapping[str, str], cpu_count: int | None = None) -> CpuTopology:
    """Topology from ``{sysfs path: content}`` (paths under ``/sys/devices/system/cpu``).

    CPUs are ranked by ``cpu_capacity`` when every CPU has one, else by ``cpuinfo_max_freq``;
    CPUs of equal rank form one cluster. ``cpu_count`` adds CPUs that have no files (offline).
    """
    per_cpu: dict[int, dict[str, str]] = {}
    for path, content in files.items():
        match = _CPU_FILE.search(path.rstrip("/"))
        if match is None:
            continue
        per_cpu.setdefault(int(match.group(1)), {})[match.group(2)] = content.strip()
    for cpu in range(cpu_count or 0):
        per_cpu.setdefault(cpu, {})
    cpus = tuple(
        CpuFreq(
            cpu=cpu,
            cpuinfo_max_khz=to_int(fields.get("cpuinfo_max_freq")),
            scaling_max_khz=to_int(fields.get("scaling_max_freq")),
            scaling_cur_khz=to_int(fields.get("scaling_cur_freq")),
            capacity=to_int(fields.get("cpu_capacity")),
            related_cpus=tuple(_cpu_list(fields.get("related_cpus", ""))),
        )
        for cpu, fields in sorted(per_cpu.items())
    )
    return CpuTopology(cpus=cpus, clusters=_clusters(cpus))


def _clusters(cpus: tuple[CpuFreq, ...]) -> tuple[tuple[int, ...], ...]:
    if not cpus:
        return ()
    by_capacity = all(c.capacity is not None for c in cpus)
    ranks: dict[int, int] = {}
    for c in cpus:
        rank = c.capacity if by_capacity else c.cpuinfo_max_khz
        if rank is None:  # an offline CPU: borrow the rank of a policy that lists it
            rank = next((o.cpuinfo_max_khz for o in cpus
                         if c.cpu in o.related_cpus and o.cpuinfo_max_khz is not None), 0)
        ranks[c.cpu] = rank or 0
    levels = sorted(set(ranks.values()), reverse=True)
    return tuple(tuple(sorted(cpu for cpu, r in ranks.items() if r == level)) for level in levels)


def _cpu_list(text: str) -> list[int]:
    """``"0 1 2 3"`` (related_cpus) or ``"0-3,6"`` (online/possible) as a list of ints."""
    cpus: list[int] = []
    for part in re.split(r"[\s,]+", text.strip()):
        low, dash, high = part.partition("-")
        if low.isdigit() and (not dash or high.isdigit()):
            cpus.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    return cpus


def parse_cpu_range(text: str) -> tuple[int, ...]:
    """``/sys/devices/system/cpu/possible`` style ``"0-7"`` or ``"0-3,6"``."""
    return tuple(_cpu_list(text))


def parse_head_dump(text: str) -> dict[str, str]:
    """``head`` over several files (``==> PATH <==`` then the content) as ``{path: content}``.

    One ``head`` call reads dozens of sysfs files in a single round trip to the device.
    """
    files: dict[str, str] = {}
    path: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        match = re.match(r"^==> (.+) <==$", line.rstrip("\r"))
        if match is not None:
            if path is not None:
                files[path] = "\n".join(body).strip()
            path, body = match.group(1), []
        elif path is not None:
            body.append(line.rstrip("\r"))
    if path is not None:
        files[path] = "\n".join(body).strip()
    return files


def format_cpu_range(cpus: Iterable[int]) -> str:
    """CPU numbers as the kernel writes a list: ``"0-3,6"`` (sorted, runs collapsed)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None and prev is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def mask_cpus(mask: str) -> frozenset[int]:
    """The CPUs of a hex affinity mask (``0xf0`` or ``f0``, as taskset takes it); empty if bad."""
    text = mask.strip().lower().removeprefix("0x")
    try:
        value = int(text, 16) if text else 0
    except ValueError:
        return frozenset()
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)
