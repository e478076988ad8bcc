"""A night is a run: a nightly run that crosses UTC midnight is one night, in the frames every
analysis groups by and on the dashboard (issue 48, item 6)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from harness.analysis.frames import nights
from harness.analysis.trend import nightly_history
from harness.run.session import new_run_id
from harness.site import paths
from harness.site.build import build_site
from harness.store import write_part

from .factory import cell, trial

BEFORE = datetime(2026, 3, 2, 23, 50, tzinfo=UTC)  # the run starts ten minutes before midnight
RUN = new_run_id(BEFORE)


def test_a_run_across_midnight_is_the_night_it_started() -> None:
    frame = pd.DataFrame({
        "started_at": pd.to_datetime([BEFORE, BEFORE + timedelta(minutes=30),
                                      BEFORE + timedelta(hours=3), BEFORE, None], utc=True),
        "run_id": [RUN, RUN, "farm-night", "farm-night", None],
    })
    frame.loc[2, "started_at"] = pd.Timestamp("2026-03-03 01:00", tz="UTC")
    assert nights(frame).tolist() == ["2026-03-02", "2026-03-02", "2026-03-02", "2026-03-02",
                                      None]
    # without run ids, each trial is its own date (as before runs were told apart)
    assert nights(frame.drop(columns=["run_id"])).tolist()[:3] == ["2026-03-02", "2026-03-03",
                                                                   "2026-03-03"]


def test_one_phones_history_keeps_the_night_its_run_started() -> None:
    """History filtered to the phone whose trials all ran after midnight: still that night."""
    c = cell()
    records = [trial(c, run_id=RUN, serial="SER1", rep=i, started_at=BEFORE) for i in range(3)]
    records += [trial(c, run_id=RUN, serial="SER2", rep=i,
                      started_at=BEFORE + timedelta(minutes=20 + i)) for i in range(3)]
    frame = pd.DataFrame([dataclasses.asdict(r) for r in records])
    (series,) = nightly_history(frame, "tg_tps", device="SER2")
    assert [p.night for p in series.points] == ["2026-03-02"]


def test_a_nightly_across_midnight_is_one_night_on_the_dashboard(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    c = cell()
    # two phones; the second phone's trials all ran after midnight
    records = [trial(c, run_id=RUN, serial="SER1", rep=i, started_at=BEFORE + timedelta(
                   minutes=2 * i)) for i in range(3)]
    records += [trial(c, run_id=RUN, serial="SER2", rep=i, started_at=BEFORE + timedelta(
                    minutes=20 + 2 * i)) for i in range(3)]
    write_part(store, "trials", records, RUN, when=BEFORE)
    build_site(store, site, recommend=False)
    assert (site / paths.night_page("2026-03-02")).is_file()
    assert not (site / paths.night_page("2026-03-03")).exists()  # not half a night
    night = (site / paths.night_page("2026-03-02")).read_text()
    assert "SER1" in night and "SER2" in night
