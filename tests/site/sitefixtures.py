"""Small synthetic stores for the site tests, the site built from them, and helpers.

``farm_store``: three phones with hostile names for eight nights (build b4100, then the
regressed b4101), then two more nights of b4101 without the third phone (missing two nights);
the second phone's battery temperature climbs 0.4 °C a night (rewritten into its parts).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from harness.site.build import BuildResult, build_site
from harness.testing.synthstore import SynthSpec, write_synthetic_store

HOSTILE = ("<b>x</b>", "Pixel <script>alert(1)</script>", "Galaxy $x$ & S23")
FIRST = SynthSpec(devices=3, nights=8, reps=3, quants=("Q4_0", "Q8_0"), kv_types=("f16",),
                  device_names=HOSTILE)
HOT_SERIAL = "SYN0001"
GONE_SERIAL = "SYN0002"


def later(spec: SynthSpec, nights: int, devices: int | None = None, seed: int = 11) -> SynthSpec:
    """More nights of ``spec``'s last build right after its own, optionally fewer phones."""
    return SynthSpec(devices=spec.devices if devices is None else devices, nights=nights,
                     reps=spec.reps, quants=spec.quants, kv_types=spec.kv_types,
                     n_ctx=spec.n_ctx, device_names=spec.device_names,
                     builds=(spec.builds[-1],), regressed_build=spec.regressed_build,
                     start=spec.start + timedelta(days=spec.nights), seed=seed)


def heat_battery(root: Path, serial: str, per_night: float) -> None:
    """Rewrite every trials part so ``serial``'s battery temperature climbs night by night."""
    parts = sorted((root / "trials").glob("date=*/*.parquet"))
    days = sorted({p.parent.name for p in parts})
    for part in parts:
        table = pq.read_table(part)
        night = days.index(part.parent.name)
        mine = pc.equal(table.column("device_serial"), serial).to_numpy(zero_copy_only=False)
        temps = table.column("battery_temp_c").to_numpy(zero_copy_only=False).astype(float)
        temps = np.where(mine, 30.0 + per_night * night, temps)
        index = table.schema.get_field_index("battery_temp_c")
        table = table.set_column(index, table.schema.field(index),
                                 pa.array(temps, type=table.schema.field(index).type))
        pq.write_table(table, part)


@pytest.fixture(scope="session")
def farm_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("farm") / "results"
    write_synthetic_store(root, FIRST)
    write_synthetic_store(root, later(FIRST, nights=2, devices=2))
    heat_battery(root, HOT_SERIAL, 0.4)
    return root


@dataclass
class Site:
    root: Path
    result: BuildResult

    def read(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def html_pages(self) -> list[Path]:
        return sorted(self.root.rglob("*.html"))


@pytest.fixture(scope="session")
def farm_site(farm_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Site:
    out = tmp_path_factory.mktemp("site") / "site"
    return Site(out, build_site(farm_store, out))
