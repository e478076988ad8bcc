"""The bisect search (harness.analysis.bisect): pure, no git, no builds, no phone."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import pytest

from harness.analysis.bisect import (
    UNSTABLE_TRIES,
    BisectError,
    Measured,
    NotARegression,
    Outcome,
    Search,
    Step,
    judge,
    outcome_of,
    replay,
    status,
)

Oracle = Callable[[str, int], Outcome]


def commits(n: int) -> tuple[str, ...]:
    return tuple(f"c{i:03d}" for i in range(n))


def drive(search: Search, oracle: Oracle, limit: int = 100) -> tuple[Step, list[str]]:
    """Run the search to the end, asking ``oracle(commit, attempt)`` for each test's outcome."""
    results: dict[str, list[Outcome]] = {}
    tested: list[str] = []
    for _ in range(limit):
        step = search.next_step(results)
        if step.kind == "done":
            return step, tested
        assert step.commit is not None
        tested.append(step.commit)
        attempt = len(results.get(step.commit, []))
        results.setdefault(step.commit, []).append(oracle(step.commit, attempt))
    raise AssertionError("the search did not end")


def first_bad_at(index: int, skip: Sequence[int] = ()) -> Oracle:
    def oracle(commit: str, attempt: int) -> Outcome:
        i = int(commit[1:])
        if i in skip:
            return "skip"
        return "bad" if i >= index else "good"
    return oracle


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 17, 31, 64, 100])
def test_finds_every_first_bad_commit_within_log2_n_plus_2_steps(n: int) -> None:
    search = Search("good", commits(n))
    bound = math.ceil(math.log2(n)) + 2 if n > 1 else 2
    for index in range(n):
        step, tested = drive(search, first_bad_at(index))
        assert step.first_bad == f"c{index:03d}"
        assert step.candidates == (f"c{index:03d}",)
        assert step.last_good == (f"c{index - 1:03d}" if index else "good")
        assert len(tested) <= bound, (index, tested)
        assert len(tested) <= search.max_tests()
        assert tested[0] == search.bad  # the bad end is measured first


def test_a_commit_that_does_not_compile_is_skipped_for_a_neighbour() -> None:
    search = Search("good", commits(16))
    # the first midpoint (7) does not compile; the slow commit is 11
    step, tested = drive(search, first_bad_at(11, skip=[7]))
    assert step.first_bad == "c011" and step.candidates == ("c011",)
    assert tested[:3] == ["c015", "c007", "c008"]  # the later neighbour is tried
    assert tested.count("c007") == 1
    assert len(tested) <= math.ceil(math.log2(16)) + 2


def test_skipped_commits_next_to_the_first_bad_one_are_named_as_candidates() -> None:
    search = Search("good", commits(16))
    step, _ = drive(search, first_bad_at(10, skip=[9]))
    assert step.first_bad == "c010"
    assert step.candidates == ("c009", "c010")
    assert step.last_good == "c008"


def test_unstable_is_measured_again_up_to_three_times_then_skipped() -> None:
    search = Search("good", commits(8))
    unstable_twice: Oracle = lambda c, attempt: (  # noqa: E731
        "unstable" if c == "c003" and attempt < 2 else first_bad_at(5)(c, attempt))
    step, tested = drive(search, unstable_twice)
    assert step.first_bad == "c005" and tested.count("c003") == 3
    always: Oracle = lambda c, attempt: (  # noqa: E731
        "unstable" if c == "c003" else first_bad_at(5)(c, attempt))
    step, tested = drive(search, always)
    assert step.first_bad == "c005" and tested.count("c003") == 3
    assert status(["unstable"]) == "retry"
    assert status(["unstable", "unstable"]) == "retry"
    assert status(["unstable"] * UNSTABLE_TRIES) == "skip"
    assert status(["unstable", "unstable", "bad"]) == "bad"
    assert status([]) is None


def test_resumes_from_a_partial_log() -> None:
    search = Search("good", commits(16))
    log = [
        {"event": "start", "good": "good"},
        {"event": "build", "commit": "good", "ok": True},
        {"event": "build", "commit": "c015", "ok": True},
        {"event": "measure", "commit": "c015", "verdict": "regression", "outcome": "bad"},
        {"event": "build", "commit": "c007", "ok": False},
        {"event": "build", "commit": "c008", "ok": True},
        {"event": "measure", "commit": "c008", "verdict": "same", "outcome": "good",
         "run_ids": ["r1"]},
    ]
    state = replay(log)
    assert state.results == {"c015": ["bad"], "c007": ["skip"], "c008": ["good"]}
    assert state.built("c007") is False and state.built("c008") is True
    assert state.built("c001") is None
    assert state.run_ids("c008") == ["r1"]
    step = search.next_step(state.results)
    assert step.kind == "test" and step.commit == "c012"  # (9 + 15) // 2
    # finishing from the log gives what an uninterrupted search gives
    results: dict[str, list[Outcome]] = {k: list(v) for k, v in state.results.items()}
    oracle = first_bad_at(11, skip=[7])
    while (step := search.next_step(results)).kind == "test":
        assert step.commit is not None
        results.setdefault(step.commit, []).append(oracle(step.commit, 0))
    assert step.first_bad == drive(search, oracle)[0].first_bad == "c011"


def test_a_bad_end_that_is_not_slower_stops_the_bisect() -> None:
    search = Search("good", commits(8))
    with pytest.raises(NotARegression, match="not slower than the good one"):
        search.next_step({"c007": ["good"]})
    with pytest.raises(BisectError, match="could not be judged"):
        search.next_step({"c007": ["skip"]})
    assert search.next_step({"c007": ["unstable"]}) == Step("test", "c007", retry=True)


@pytest.mark.parametrize(("good", "listed", "results", "message"), [
    ("good", (), {}, "no commits"),
    ("c001", ("c000", "c001"), {}, "good revision is among"),
    ("good", ("c000", "c000"), {}, "listed twice"),
    ("good", ("c000",), {"zzz": ["good"]}, "outside the bisect"),
])
def test_bad_inputs(good: str, listed: tuple[str, ...], results: Mapping[str, list[Outcome]],
                    message: str) -> None:
    with pytest.raises(BisectError, match=message):
        Search(good, listed).next_step(results)


def test_verdicts_map_to_outcomes_and_bad_logs_are_refused() -> None:
    assert [outcome_of(v) for v in ("regression", "same", "improvement", "unstable")] == [
        "bad", "good", "good", "unstable"]
    with pytest.raises(BisectError):
        outcome_of("maybe")
    # without the CV veto: a noisy interval wholly above 1 - noise rules the slowdown out ...
    cv = ("high_cv",)
    assert judge(Measured("unstable", 1.2, 0.93, 1.4, 0.3, cv), noise=0.10) == "good"
    # ... and a significant one wholly below 1 with its estimate beyond the band holds it
    assert judge(Measured("unstable", 0.5, 0.47, 0.79, 0.001, cv), noise=0.30) == "bad"
    assert judge(Measured("unstable", 0.75, 0.6, 0.9, 0.001, cv), noise=0.30) == "unstable"
    assert judge(Measured("unstable", 0.5, 0.4, 0.8, 0.2, cv), noise=0.30) == "unstable"
    assert judge(Measured("unstable", 0.9, 0.86, 1.1, 0.5, cv), noise=0.10) == "unstable"
    assert judge(Measured("unstable", None, None, None, None), noise=0.10) == "unstable"
    assert judge(Measured("unstable", 1.0, float("nan"), 1.1, 0.5), noise=0.10) == "unstable"
    # too few repetitions, throttled trials or no ratio are never read past
    assert judge(Measured("unstable", 1.2, 0.93, 1.4, 0.3, ("throttled",)), 0.10) == "unstable"
    assert judge(Measured("regression", 0.5, 0.4, 0.6, 0.001), noise=0.10) == "bad"
    with pytest.raises(BisectError, match="unknown event"):
        replay([{"event": "nonsense"}])
    with pytest.raises(BisectError, match="unknown outcome"):
        replay([{"event": "measure", "commit": "c1", "outcome": "fast"}])
