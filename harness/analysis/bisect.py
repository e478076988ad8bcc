"""The search of ``harness bisect``: a pure state machine over a list of commits and their results.

No git, no cmake, no phone here: ``next_step`` looks at the commits between a good and a bad
revision (oldest first, the bad one last) and at what is known about each, and says what to do
next: test a commit (build it, measure it against the good build), test it again with more
repetitions, or stop with the first bad commit. ``replay`` turns the bisect's JSON-lines log back
into those results, which is what makes a killed bisect resumable.

Rules (docs/bisect.md):

* a commit's measurement against the good build is ``bad`` on a ``regression`` verdict of tg_tps
  and ``good`` on ``same`` or ``improvement``. The bisect's question is one-sided (does this
  commit hold the slowdown?) and its interval already carries the noise, so compare's veto on a
  coefficient of variation over 10% is not applied (``judge``): an ``unstable`` verdict whose
  whole interval lies above ``1 - noise`` is ``good`` (no slowdown beyond the band), and one
  that is significant, with its whole interval below 1 and its estimate below ``1 - noise``, is
  ``bad`` (compare's own regression rule without the veto). Too few repetitions, throttled
  trials or no ratio are never overridden. Any other ``unstable`` is measured again with added
  repetitions (``retry``), up to ``UNSTABLE_TRIES`` measurements in all, then ``skip``;
* a commit that does not compile is ``skip``ped, like ``git bisect skip``: the nearest testable
  neighbour of the midpoint is tested instead;
* the bad end is tested first: if it is not a regression against the good build, there is
  nothing to bisect (``NotARegression``);
* the search ends when no testable commit is left between the last good and the first bad one;
  skipped commits in that stretch are listed as possible culprits, as git does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import HarnessError

Outcome = Literal["good", "bad", "unstable", "skip"]
Status = Literal["good", "bad", "skip", "retry"]
#: measurements of one commit before an unstable verdict counts as ``skip``: each retry adds
#: ``--reps`` repetitions and is judged on all of them, so a loaded host's noise is given room
#: to average out (a load burst made one step unstable twice, and the answer a range, in a
#: loaded test run) while a commit that never settles costs at most three measurements
UNSTABLE_TRIES = 3
OUTCOMES: tuple[Outcome, ...] = ("good", "bad", "unstable", "skip")
#: compare.py's verdict on tg_tps (candidate vs good) -> what it means for the bisect.
VERDICT_OUTCOME: dict[str, Outcome] = {
    "regression": "bad", "same": "good", "improvement": "good", "unstable": "unstable",
}


class BisectError(HarnessError):
    """The bisect cannot go on (bad input, or an end that does not behave as claimed)."""


class NotARegression(BisectError):
    """The bad revision is not slower than the good one: nothing to bisect."""


def outcome_of(verdict: str) -> Outcome:
    """What a comparison verdict (compare.py's ``Verdict``) means for the bisect."""
    try:
        return VERDICT_OUTCOME[verdict]
    except KeyError:
        raise BisectError(f"unknown verdict {verdict!r}") from None


ALPHA = 0.05  # compare's significance level
#: causes of an unstable verdict that no reading of the interval can override
HARD_CAUSES = frozenset({"too_few_reps", "throttled", "no_ratio"})


@dataclass(frozen=True)
class Measured:
    """What ``judge`` reads of one comparison (compare.py's ``Comparison``)."""

    verdict: str
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_adjusted: float | None = None
    causes: tuple[str, ...] = ()


def _or_nan(value: float | None) -> float:
    return value if value is not None else math.nan  # NaN compares false: no reading


def judge(m: Measured, noise: float) -> Outcome:
    """A measurement's outcome: ``outcome_of`` its verdict, except an unstable one read without
    the CV veto (see the module's docstring): its whole interval above ``1 - noise`` is ``good``;
    significant, its whole interval below 1 and its estimate below ``1 - noise`` is ``bad``."""
    outcome = outcome_of(m.verdict)
    if outcome != "unstable" or HARD_CAUSES & set(m.causes):
        return outcome
    ratio, low, high, p = (_or_nan(v) for v in (m.ratio, m.ci_low, m.ci_high, m.p_adjusted))
    if low > 1.0 - noise:
        return "good"
    if high < 1.0 and ratio < 1.0 - noise and p < ALPHA:
        return "bad"
    return outcome


def status(outcomes: Sequence[Outcome]) -> Status | None:
    """A commit's state from its outcomes in order: None untested, ``retry`` after fewer than
    ``UNSTABLE_TRIES`` unstable measurements, ``skip`` after a failed build or that many."""
    if not outcomes:
        return None
    if "skip" in outcomes:
        return "skip"
    last = outcomes[-1]
    if last in ("good", "bad"):
        return last
    return "retry" if outcomes.count("unstable") < UNSTABLE_TRIES else "skip"


@dataclass(frozen=True)
class Step:
    """What to do next: ``test`` a commit (``retry``: again, with more repetitions) or ``done``."""

    kind: Literal["test", "done"]
    commit: str | None = None
    retry: bool = False
    first_bad: str | None = None
    last_good: str | None = None
    # commits the first bad one may be, oldest first: skipped ones before it, then it
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Search:
    """A bisect between ``good`` (known good: the baseline build) and ``commits[-1]`` (bad).

    ``commits`` are the first-parent commits good..bad, oldest first, the bad revision last.
    """

    good: str
    commits: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.commits:
            raise BisectError("no commits between the good and the bad revision")
        if self.good in self.commits:
            raise BisectError("the good revision is among the commits to bisect")
        if len(set(self.commits)) != len(self.commits):
            raise BisectError("a commit is listed twice")

    @property
    def bad(self) -> str:
        return self.commits[-1]

    def max_tests(self) -> int:
        """Tests (the bad end included) a search without skips or retries needs at most."""
        return math.ceil(math.log2(len(self.commits))) + 1 if len(self.commits) > 1 else 1

    def next_step(self, results: Mapping[str, Sequence[Outcome]]) -> Step:
        """The next step given each commit's outcomes so far (missing: untested)."""
        unknown = sorted(set(results) - set(self.commits) - {self.good})
        if unknown:
            raise BisectError(f"results for commits outside the bisect: {', '.join(unknown)}")
        states = [status(results.get(c, ())) for c in self.commits]
        end = states[-1]
        if end is None or end == "retry":
            return Step("test", self.bad, retry=end == "retry")
        if end == "skip":
            raise BisectError(f"the bad revision {self.bad[:12]} could not be judged "
                              "(it did not compile, or its measurement stayed unstable)")
        if end == "good":
            raise NotARegression(f"the bad revision {self.bad[:12]} is not slower than the good "
                                 f"one {self.good[:12]} (no tg_tps regression): nothing to bisect")
        hi = min(i for i, s in enumerate(states) if s == "bad")
        goods = [i for i, s in enumerate(states[:hi]) if s == "good"]
        lo = (max(goods) + 1) if goods else 0
        for i in range(lo, hi):  # a measurement to repeat comes first
            if states[i] == "retry":
                return Step("test", self.commits[i], retry=True)
        testable = [i for i in range(lo, hi) if states[i] is None]
        if not testable:
            last_good = self.commits[lo - 1] if lo else self.good
            return Step("done", first_bad=self.commits[hi], last_good=last_good,
                        candidates=tuple(self.commits[lo:hi + 1]))
        mid = (lo + hi) // 2
        pick = min(testable, key=lambda i: (abs(i - mid), i < mid))  # nearest, later first
        return Step("test", self.commits[pick])


@dataclass
class Replayed:
    """What a bisect log says: each commit's outcomes, builds made and every record."""

    results: dict[str, list[Outcome]] = field(default_factory=dict)
    builds: list[dict[str, Any]] = field(default_factory=list)
    measures: list[dict[str, Any]] = field(default_factory=list)
    start: dict[str, Any] | None = None
    done: dict[str, Any] | None = None

    def run_ids(self, commit: str) -> list[str]:
        """Run ids of the measurements of ``commit`` so far (a retry adds to them)."""
        ids: list[str] = []
        for record in self.measures:
            if record["commit"] == commit:
                ids.extend(r for r in record.get("run_ids", []) if r not in ids)
        return ids

    def built(self, commit: str) -> bool | None:
        """Whether ``commit`` compiled (None: not built in this bisect)."""
        found = [b["ok"] for b in self.builds if b["commit"] == commit]
        return found[-1] if found else None


def replay(records: Iterable[Mapping[str, Any]]) -> Replayed:
    """Fold a bisect log's records (``start``, ``build``, ``measure``, ``done``) into results."""
    state = Replayed()
    for record in records:
        event = record.get("event")
        if event == "start":
            state.start = dict(record)
        elif event == "build":
            state.builds.append(dict(record))
            if not record["ok"]:
                state.results.setdefault(record["commit"], []).append("skip")
        elif event == "measure":
            state.measures.append(dict(record))
            outcome = record["outcome"]
            if outcome not in OUTCOMES:
                raise BisectError(f"bisect log: unknown outcome {outcome!r}")
            state.results.setdefault(record["commit"], []).append(outcome)
        elif event == "done":
            state.done = dict(record)
        else:
            raise BisectError(f"bisect log: unknown event {event!r}")
    return state
