"""What a change point lets a person bisect, in words: a ``harness bisect`` line between two
llama.cpp revisions, or why there is nothing to bisect."""

from __future__ import annotations

import re
import shlex


def bisect_line(good: str, bad: str, cell_id: str, serial: str) -> str:
    """A copy-ready ``harness bisect`` command for one change point (every value quoted)."""
    q = shlex.quote
    return (f"harness bisect --source LLAMA_CPP_CHECKOUT --good {q(good)} --bad {q(bad)} "
            f"--cell {q(cell_id)} --results RESULTS --devices {q(serial)}")


#: The engine whose builds ``harness bisect`` compiles and measures (llama.cpp's llama-bench).
BISECTED_ENGINE = "llama-bench"
#: A build id that names a llama.cpp revision: a release tag (b4100) or a commit.
REVISION = re.compile(r"b\d+|[0-9a-f]{7,40}")


def bisect_advice(before: str, after: str, commits: tuple[str | None, str | None],
                  engine: str, cell_id: str, serial: str) -> dict[str, str | None]:
    """What a change point between builds ``before`` and ``after`` lets a person bisect: a
    ``harness bisect`` line between the two builds' llama.cpp commits (their build ids when the
    trials recorded no single commit: ids such as b4100 are llama.cpp tags), or, when there is
    nothing to bisect, why not (``bisect`` None, ``bisect_note`` the reason)."""
    if engine != BISECTED_ENGINE:
        return {"bisect": None, "bisect_note": f"harness bisect compiles llama.cpp's "
                f"{BISECTED_ENGINE}; this series ran {engine}: nothing to bisect here"}
    good, bad = commits
    if good is not None and good == bad:
        return {"bisect": None, "bisect_note": (
            f"{before} and {after} were built from the same llama.cpp commit ({good[:12]}): "
            "the change is not in its source (build flags, toolchain or the phone), so there "
            "is nothing to bisect")}
    if good is None or bad is None:
        if before == after:
            return {"bisect": None, "bisect_note": (
                f"both nights ran build {before} and its trials recorded no single llama.cpp "
                "commit per night: nothing names the revisions to bisect")}
        good, bad = before, after
        names = [b for b in (good, bad) if not REVISION.fullmatch(b)]
        if names:
            return {"bisect": None, "bisect_note": (
                f"the trials recorded no llama.cpp commit, and build {names[0]} is not a "
                "revision git knows (a tag such as b4100 or a commit): nothing names the "
                "revisions to bisect")}
    return {"bisect": bisect_line(good, bad, cell_id, serial), "bisect_note": None}
