"""Figure 1 within one launch: the sampler switched on and off while one engine generates.

Across launches, this host's tiny-model generation rate varies 12-21% (CV) from one launch to
the next, while repetitions inside one launch vary ~3%: trial-against-trial ratios cannot
resolve a 1% effect in any affordable number of rounds. So the sampler's cost is also measured
where launch effects cancel: one llama-bench launch on the virtual phone generates ``block``
repetitions per block, back to back, and a reader of its ``--progress`` lines (on the phone,
in the launch's own shell) starts the harness's sampler at the first repetition of an "on"
block and stops it at the next block's first repetition. Each "on" block's rate is divided by
the mean of the two "off" blocks beside it, so slow drift cancels too.

Faithful to a trial, and on the conservative side: the sampler is the harness's own script with
the rates a default ``harness run`` gives it, started afresh for every block, so its 2 s fast
start (10-50 ms ticks) falls on generation in every block, where in a trial it mostly overlaps
the model's load. Each sampled block's folder and FIFO are made before the engine starts, as a
trial's launching shell makes its FIFO before its exec. The first ``SKIP`` repetitions of each
block are left out of both arms: the switch happens while they run (the reader sees a
repetition's line as it starts).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.run import ondevice

OFF = "n"
ARM_NAMES = {"d": "default", "t": "10hz", "z": "placebo"}  # z: the switch, no sampler
SKIP = 2  # repetitions at the start of a block that the switch may overlap
WORKDIR = "/data/local/tmp/harness/bench-interleave"


@dataclass
class Launch:
    """What the harness ran for a trial: captured from its launch line (see ``capture``)."""

    argv: list[str] = field(default_factory=list)
    lib_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    rates: ondevice.Rates | None = None


@contextlib.contextmanager
def capture() -> Iterator[Launch]:
    """Record the launch line's parts of the trials run inside (the last one counts)."""
    from harness.run import trial

    original = trial.launch_command
    launch = Launch()

    def recording(workdir: str, argv: Sequence[str], lib_dir: str | None,
                  sampler: ondevice.Rates | None = None,
                  env: Mapping[str, str] | None = None, prelude: str = "") -> str:
        launch.argv, launch.lib_dir, launch.env = list(argv), lib_dir, dict(env or {})
        launch.rates = sampler
        return original(workdir, argv, lib_dir, sampler, env, prelude)

    trial.launch_command = recording
    try:
        yield launch
    finally:
        trial.launch_command = original


def block_arms(on_blocks: int, pattern: str = "dz") -> list[str]:
    """Off, on, off, on, ... off: ``on_blocks`` on-blocks cycling through ``pattern`` (pure)."""
    arms = [OFF]
    for index in range(on_blocks):
        arms += [pattern[index % len(pattern)], OFF]
    return arms


def engine_argv(argv: Sequence[str], n_gen: int, reps: int) -> list[str]:
    """The trial's llama-bench command as generation-only repetitions with progress lines."""
    out = list(argv)
    values = {"-p": "0", "-n": str(n_gen), "-r": str(reps)}
    for index, word in enumerate(out[:-1]):
        if word in values:
            out[index + 1] = values[word]
    missing = [flag for flag in values if flag not in out]
    if missing:
        raise ValueError(f"the captured engine command lacks {', '.join(missing)}: {out}")
    return [*out, "--progress"]


_STAT = "read -r _ _ _ _ _ _ _ _ _ _ _ _ _"  # then utime stime: /proc/<pid>/stat's 14th, 15th


def device_script(launch: Launch, arms: Sequence[str], block: int, n_gen: int,
                  workdir: str = WORKDIR) -> str:
    """The shell text run on the phone: the engine in a pipeline whose reader switches samplers.

    Written for mksh (and dash). The engine runs ``block`` repetitions per arm and one block
    more, whose start closes the last arm's block. At every block's start the reader appends to
    ``blocks`` "b <block> <arm> <engine utime> <stime> <steal> <uptime> <run>,<wait> ..."
    (clock ticks; the host's steal time from /proc/stat's cpu line; each engine thread's
    schedstat: ns on a CPU and ns waiting for one), and at an on-block's end
    "x <block> <sampler utime> <stime>". Sums are left to the host: mksh's arithmetic is 32-bit.
    """
    if launch.rates is None:
        raise ValueError("no sampler rates captured: the trial ran without its sampler")
    reps = block * (len(arms) + 1)
    settings = {**({"LD_LIBRARY_PATH": launch.lib_dir} if launch.lib_dir else {}), **launch.env}
    prefix = ["env", *(f"{k}={v}" for k, v in sorted(settings.items()))] if settings else []
    words = " ".join(shlex.quote(w) for w in [*prefix, *engine_argv(launch.argv, n_gen, reps)])
    ten_hz = replace(launch.rates, memory_s=0.1)
    folder = shlex.quote(workdir)
    # every sampled block's folder and FIFO made before the engine starts, as a trial's
    # launching shell makes its FIFO before its exec: not two forks inside a measured block
    sampled = [index for index, arm in enumerate(arms) if arm in ("d", "t")]
    on = " ".join(f"b{index}" for index in sampled)
    return "\n".join([
        f"rm -rf {folder}; mkdir -p {folder} && cd {folder} || exit 1",
        f"Sd={shlex.quote(ondevice.script(launch.rates))}",
        f"St={shlex.quote(ondevice.script(ten_hz))}",
        *([f"mkdir {on} && mkfifo {' '.join(f'b{i}/nap' for i in sampled)} || exit 1"]
          if sampled else []),
        "sh -c 'echo $$ > pid; exec \"$@\"' engine " + words + " 2>&1 > out | {",
        f"n=0; k=-1; s=; p=; a=; set -- {' '.join(arms)}",
        "stop() { [ -n \"$s\" ] || return 0; su=-; ss=-",
        f"{_STAT} su ss _ 2>/dev/null < /proc/$s/stat",
        "echo \"x $k $su $ss\" >> blocks; kill \"$s\" 2>/dev/null; wait \"$s\"; s=; }",
        "while IFS= read -r l; do",
        "case $l in *': generation run '*) ;; *) continue;; esac",
        f"n=$((n + 1)); [ $(( (n - 1) % {block} )) -eq 0 ] || continue",
        "[ -n \"$p\" ] || read -r p < pid; stop; k=$((k + 1)); a=${1:-n}; [ $# -gt 0 ] && shift",
        f"eu=-; es=-; {_STAT} eu es _ 2>/dev/null < /proc/$p/stat",
        "st=-; read -r _ _ _ _ _ _ _ _ st _ 2>/dev/null < /proc/stat; read -r u _ < /proc/uptime",
        "q=; for f in /proc/$p/task/*/schedstat; do r1=; r2=; read -r r1 r2 _ 2>/dev/null < $f",
        "[ -n \"$r2\" ] && q=\"$q $r1,$r2\"; done; echo \"b $k $a $eu $es $st $u$q\" >> blocks",
        "case $a in d|t) eval \"x=\\$S$a\"",
        "( cd b$k && exec sh -c \"$x\" sample \"$p\" > /dev/null 2>&1 < /dev/null"
        " ) & s=$!;; esac",
        "done; stop; }",
        "echo ==out; cat out; echo ==blocks; cat blocks",
    ]) + "\n"


@dataclass(frozen=True)
class Mark:
    """The reader's notes at one block's start (and the sampler's CPU at its end)."""

    arm: str
    engine_ticks: int | None = None  # utime + stime
    steal_ticks: float | None = None  # the host's, all CPUs
    uptime_s: float | None = None
    sched_ns: int | None = None  # all engine threads: time on a CPU plus time waiting for one
    sampler_ticks: int | None = None  # the block's sampler, utime + stime, at its end


def _float(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


def _sched(words: Sequence[str]) -> int | None:
    total = 0
    for word in words:
        run_ns, _, wait_ns = word.partition(",")
        if not (run_ns.isdigit() and wait_ns.isdigit()):
            return None
        total += int(run_ns) + int(wait_ns)
    return total if words else None


def parse_marks(text: str) -> dict[int, Mark]:
    """The reader's ``blocks`` file, by block (pure; unreadable values are None)."""
    found: dict[int, Mark] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 7 and words[0] == "b" and words[1].isdigit():
            ticks = (int(words[3]) + int(words[4])
                     if words[3].isdigit() and words[4].isdigit() else None)
            found[int(words[1])] = Mark(words[2], ticks, _float(words[5]), _float(words[6]),
                                        _sched(words[7:]))
        elif (len(words) == 4 and words[0] == "x" and words[1].isdigit()
              and int(words[1]) in found and words[2].isdigit() and words[3].isdigit()):
            index = int(words[1])
            found[index] = replace(found[index], sampler_ticks=int(words[2]) + int(words[3]))
    return found


def generation_samples(out: str) -> list[int]:
    """samples_ns of the generation test in llama-bench's JSON lines (pure)."""
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("n_gen", 0) > 0 and record.get("n_prompt", 0) == 0:
                return [int(v) for v in record.get("samples_ns") or []]
    return []


@dataclass(frozen=True)
class Block:
    index: int
    arm: str
    tps: float | None  # tokens/s of wall time, over the repetitions after the first SKIP
    sched_tps: float | None  # tokens/s of the engine's time on or waiting for a CPU
    steal_share: float | None  # host steal seconds (all CPUs) per wall second
    sampler_cpu: float | None  # the sampler's CPU time over the engine's (on-blocks)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def blocks_of(samples_ns: Sequence[int], marks: Mapping[int, Mark], block: int, n_gen: int,
              skip: int = SKIP) -> list[Block]:
    """Each block closed by the next one's mark: its rates, the host's steal, the sampler's CPU.

    ``sched_tps`` counts the block's tokens against the time the engine's threads ran or waited
    to run: wall time without the moments the hypervisor took the CPU from under a running
    engine, which a phone does not have. A sampler that competes with the engine for a core
    makes it wait, and one that slows its memory makes it run longer: both still count.
    """
    out = []
    for index in sorted(marks):
        after = marks.get(index + 1)
        times = samples_ns[index * block + skip:(index + 1) * block]
        if after is None or len(samples_ns) < (index + 1) * block or not sum(times):
            continue
        mark = marks[index]
        sched = _delta(mark.sched_ns, after.sched_ns)
        wall = _delta(mark.uptime_s, after.uptime_s)
        steal = _delta(mark.steal_ticks, after.steal_ticks)
        engine = _delta(mark.engine_ticks, after.engine_ticks)
        out.append(Block(
            index, mark.arm, n_gen * len(times) / (sum(times) / 1e9),
            n_gen * block / (sched / 1e9) if sched else None,
            steal / 100 / wall if steal is not None and wall else None,
            mark.sampler_ticks / engine
            if mark.sampler_ticks is not None and engine else None))
    return out


def paired_ratios(blocks: Sequence[Block], rate: str = "tps") -> dict[str, list[float]]:
    """Each on-block's ``rate`` over the mean of the off-blocks either side of it (pure)."""
    by_index = {b.index: b for b in blocks}
    out: dict[str, list[float]] = {}
    for b in blocks:
        value = getattr(b, rate)
        if b.arm == OFF or not value:
            continue
        sides = [by_index.get(b.index + d) for d in (-1, 1)]
        rates = [getattr(s, rate) for s in sides if s is not None and s.arm == OFF]
        if len(rates) == 2 and all(rates):
            out.setdefault(ARM_NAMES.get(b.arm, b.arm), []).append(value / statistics.mean(rates))
    return out


def split_output(stdout: str) -> tuple[str, str]:
    """The ``==out`` and ``==blocks`` sections of the script's output (pure)."""
    head, _, blocks = stdout.partition("==blocks\n")
    return head.partition("==out\n")[2], blocks


def run(device: Any, launch: Launch, on_blocks: int, block: int, n_gen: int,
        pattern: str = "dz", timeout_s: float = 3600) -> tuple[list[Block], dict[str, Any]]:
    """One launch on ``device``: its blocks and the raw record for the JSON file."""
    arms = block_arms(on_blocks, pattern)
    result = device.shell(device_script(launch, arms, block, n_gen), timeout=timeout_s)
    out, marks_text = split_output(result.stdout)
    samples = generation_samples(out)
    marks = parse_marks(marks_text)
    expected = block * (len(arms) + 1)
    if result.exit_code != 0 or len(samples) != expected or len(marks) != len(arms) + 1:
        raise RuntimeError(
            f"the interleaved launch failed (exit {result.exit_code}, {len(samples)} of "
            f"{expected} repetitions, {len(marks)} of {len(arms) + 1} blocks): "
            f"{result.stderr.strip()[-800:]}")
    found = blocks_of(samples, marks, block, n_gen)
    return found, {"arms": "".join(arms), "block": block, "n_gen": n_gen, "skip": SKIP,
                   "samples_ns": samples, "blocks_file": marks_text.splitlines(),
                   "blocks": [asdict(b) for b in found]}
