"""Bench figure 3's split of a dask run into per-job set-up and engine time (pure)."""

from __future__ import annotations

import pytest

from bench.farm import breakdown, dask_figures, job_split, two_host_figures


def test_the_engine_span_is_the_busiest_phones_trial_time_and_setup_is_apart() -> None:
    jobs = [{"serial": "a", "setup_s": 3.0, "trials_s": 10.0},
            {"serial": "a", "setup_s": 1.0, "trials_s": 10.0},
            {"serial": "b", "setup_s": 2.0, "trials_s": 15.0}]
    split = job_split(jobs)
    assert split["engine_span_s"] == 20.0
    assert split["setup_median_s"] == 2.0 and split["setup_total_s"] == 6.0
    assert split["setup_share"] == pytest.approx(6.0 / 41.0)
    assert job_split([])["engine_span_s"] == 0.0


def test_farm_efficiency_is_reported_by_makespan_and_by_engine_time() -> None:
    def run(phones: int, make: float, engine: float) -> dict[str, object]:
        return {"kind": "warm", "phones": phones, "makespan_s": make, "engine_span_s": engine,
                "setup_share": 0.05 * phones, "setup_median_s": 0.5, "bytes_served": 0,
                "jobs": [], "breakdown": {"setup_s": 0.5, "trials_s": engine,
                                          "rest_s": make - engine - 0.5}}

    cold = {"kind": "cold", "phones": 2, "setup_median_s": 4.0, "bytes_served": 2**20,
            "jobs": [{"bytes_fetched": 2**20}]}
    figures = {f.figure: f for f in dask_figures(
        [cold, run(1, 10.0, 8.0), run(2, 12.5, 8.0)], (1, 2), cores=2)}
    assert figures["3 farm (dask): efficiency, 2 phones"].value == pytest.approx(0.8)
    assert figures["3 farm (dask): efficiency, 2 phones"].met is False
    assert figures["3 farm (dask): engine-only efficiency, 2 phones"].value == 1.0
    assert figures["3 farm (dask): cold run set-up per job"].value == 4.0
    share = figures["3 farm (dask): set-up share of job time, 2 phones"]
    assert share.value == pytest.approx(10.0) and share.met is True
    assert "rest 4.00 s" in figures["3 farm (dask): efficiency, 2 phones"].note
    assert "the engines' own runs 0.00 s -> 0.00 s" in \
        figures["3 farm (dask): engine-only efficiency, 2 phones"].note
    assert "2 on 2 cores" in figures["3 farm (dask): engine-only efficiency, 2 phones"].note


def test_a_runs_makespan_splits_into_its_busiest_phones_setup_trials_and_the_rest() -> None:
    jobs = [{"serial": "a", "setup_s": 0.5, "trials_s": 2.0,
             "laps": {"engine": 1.5, "evidence": 0.25}},
            {"serial": "a", "setup_s": 0.1, "trials_s": 2.0, "laps": {"engine": 1.25}},
            {"serial": "b", "setup_s": 1.5, "trials_s": 2.5, "laps": {"engine": 2.25}}]
    found = breakdown(jobs, 6.0)
    assert {k: found[k] for k in ("setup_s", "trials_s", "rest_s")} == pytest.approx(
        {"setup_s": 0.6, "trials_s": 4.0, "rest_s": 1.4})
    # the busiest phone's trials by their laps: its engines' own runs apart
    assert found["engine_s"] == 2.75 and found["phases"] == {"engine": 2.75, "evidence": 0.25}
    assert breakdown([], 1.0) == {"setup_s": 0.0, "trials_s": 0.0, "rest_s": 1.0,
                                  "engine_s": 0.0, "phases": {}}


def test_the_two_host_rows_compare_one_phone_on_h1_with_one_phone_per_host() -> None:
    def run(phones: int, make: float, engine: float) -> dict[str, object]:
        return {"kind": "warm", "phones": phones, "makespan_s": make, "engine_span_s": engine}

    runs = [{"kind": "cold", "phones": 2, "makespan_s": 60.0, "engine_span_s": 60.0},
            run(1, 10.0, 8.0), run(2, 11.0, 9.0), run(2, 9.0, 7.0), run(1, 10.0, 8.0)]
    figures = {f.figure: f for f in two_host_figures({"runs": runs})}
    made = figures["3 farm (dask, 2 hosts): efficiency, 2 phones"]
    assert made.value == pytest.approx(1.0) and made.met is True  # the cold run is left out
    assert figures["3 farm (dask, 2 hosts): engine-only efficiency, 2 phones"].value == 1.0
    skipped = two_host_figures({"skipped": "network namespaces need root"})
    assert [f.value for f in skipped] == [None]
    assert "not measured: network namespaces need root" in skipped[0].note
