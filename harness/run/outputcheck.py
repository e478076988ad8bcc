"""The output check: does a build produce the right tokens, not only fast ones?

A GPU or CPU backend can be fast and wrong, and a speed with no output check can rank a broken
build first. Once per (engine, build, model file, phone) and per setting of the knobs that change
the computation (``CheckKnobs``: the KV cache's K and V types, flash attention, threads, batch
and micro-batch, the device and its layers), the build under test greedily continues a fixed
prompt on the phone with the trial's own settings (``harness-generate`` beside ``llama-bench``,
harness/artifacts/generator), and the continuation is compared with a reference on the same model
file with the same KV types and attention: llama-cpp-python on the host, greedy, same prompt
(``harness.run.reference``), which is always installed and independent of the build under test.
A bug only in the quantised-V path, only with flash attention or only at one batch split is
then looked at where the trial ran it.

Tolerance. Greedy decoding is exact arithmetic only on paper: two correct builds (other SIMD
paths, other CPUs, another thread split) round differently, and once two candidate tokens are
near a tie the continuations may part and never meet again. Rounding parts them late, a wrong
kernel at once. So the comparison counts the reference tokens the device reproduced before the
first difference (the shared prefix, in the reference's tokens: the device text must start with
their pieces) and calls the build a match when at least ``min_agree`` of them agree (all of them
when the reference ends sooner, at an end-of-generation token). The default, 8 of 16, leaves
half the continuation to rounding.

This module is pure: the command line, the parsing and the verdict. Running the command is the
worker's (``harness.run.worker``), computing the reference ``harness.run.reference``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from harness import knobs as registry  # "knobs" names a trial's CheckKnobs here
from harness.analysis.kv_loss import KvType
from harness.run.watch import launch_line

#: the greedy generator of a llama.cpp build (ours: harness/artifacts/generator), pushed with it
GENERATOR = "harness-generate"
#: text shown from the two continuations when they differ
SHOWN_CHARS = 40


class Status(StrEnum):
    """The ``output_check`` column."""

    MATCH = "match"  # the continuation agrees with the reference (within the tolerance)
    MISMATCH = "mismatch"  # it does not: the trial's speed is marked invalid
    NOT_CHECKED = "not_checked"  # no way to check (engine cannot generate, check off, ...)
    ERROR = "error"  # the check itself failed (generator crashed, no reference): no verdict


@dataclass(frozen=True)
class Reference:
    """A greedy continuation of the prompt by the reference, as bytes per token."""

    identity: str  # "llama-cpp-python 0.3.36 on the host, greedy": stored with every verdict
    echo: bytes  # the prompt as the generator prints it first: its tokens' pieces, specials too
    pieces: tuple[bytes, ...]  # the generated tokens' pieces, in order
    ended: bool = False  # stopped at an end-of-generation token before the asked count


@dataclass(frozen=True)
class Verdict:
    """One output check's result: what the ``output_*`` columns of each of its trials hold."""

    status: Status
    reference: str | None = None  # the reference's identity
    agreed: int | None = None  # reference tokens reproduced before the first difference
    reference_tokens: int | None = None  # tokens the reference generated
    detail: str | None = None  # why not checked / the error / what differed

    @property
    def agreement(self) -> float | None:
        """Share of the reference's tokens reproduced (None: nothing compared)."""
        if self.agreed is None or not self.reference_tokens:
            return None
        return self.agreed / self.reference_tokens

    def columns(self) -> dict[str, Any]:
        """The trial columns (``harness.records.TrialRecord``) this verdict fills."""
        return {
            "output_check": self.status.value,
            "output_agreement": self.agreement,
            "output_agreed_tokens": self.agreed,
            "output_reference_tokens": self.reference_tokens,
            "output_reference": self.reference,
            "output_check_detail": self.detail,
        }


def not_checked(reason: str) -> Verdict:
    return Verdict(Status.NOT_CHECKED, detail=reason)


#: V cache types that need flash attention in llama.cpp (a quantised V cache)
_PLAIN_KV = ("f32", "f16", "bf16")


_GENERATE = "harness-generate"  # the generator's flags, as the registry names them


@dataclass(frozen=True)
class CheckKnobs:
    """The settings of a trial that change what its engine computes, as the check runs them.

    Two trials with equal knobs share one check; the reference takes the KV types and whether
    attention is flash (the arithmetic); threads, batch sizes and the device change only where
    a kernel runs and how work is split, which is where such bugs live.
    """

    type_k: str = registry.default("type_k")
    type_v: str = registry.default("type_v")
    flash_attn: str = "off"  # on, off or auto
    threads: int = 0  # 0: the engine's default
    n_batch: int = 0
    n_ubatch: int = 0
    device: str = registry.CPU_DEVICE
    n_gpu_layers: int = registry.default("n_gpu_layers")

    @classmethod
    def of(cls, cell: Any) -> CheckKnobs:
        """The knobs of a ``harness.cell.Cell``."""
        return cls(type_k=cell.type_k, type_v=cell.type_v, flash_attn=cell.flash_attn,
                   threads=cell.threads, n_batch=cell.n_batch, n_ubatch=cell.n_ubatch,
                   device=cell.compute_device, n_gpu_layers=cell.n_gpu_layers)

    @property
    def reference_flash(self) -> bool:
        """Flash attention in the reference: as asked, and always with a quantised V cache
        (which llama.cpp computes only with it, ``auto`` included)."""
        return self.flash_attn == "on" or self.type_v not in _PLAIN_KV

    def argv(self) -> list[str]:
        """The generator's options for these knobs (harness_generate.cpp)."""
        words = registry.engine_args({"type_k": self.type_k, "type_v": self.type_v,
                                      "flash_attn": self.flash_attn,
                                      "compute_device": self.device,
                                      "n_gpu_layers": self.n_gpu_layers}, _GENERATE)
        # 0: the generator's own default
        sizes = {"threads": self.threads, "n_batch": self.n_batch, "n_ubatch": self.n_ubatch}
        return words + registry.engine_args({k: v for k, v in sizes.items() if v > 0}, _GENERATE)

    def text(self) -> str:
        """How a verdict's detail names the settings it checked."""
        kv = KvType(self.type_k, self.type_v).label
        return (f"KV {kv}, flash attention {self.flash_attn}, {self.threads or 'default'} "
                f"threads, batch {self.n_batch or 'default'}/{self.n_ubatch or 'default'}, "
                f"device {self.device} with {self.n_gpu_layers} layers")


def generator_command(binary: str, model: str, prompt: str, tokens: int,
                      lib_dir: str | None = None, env: Mapping[str, str] | None = None,
                      knobs: CheckKnobs = CheckKnobs()) -> str:
    """The device shell line: ``harness-generate -m MODEL -n N <knobs> PROMPT``, every word
    quoted.

    ``-dev`` and ``-ngl`` are always given (llama.cpp's own default offloads to any device a GPU
    build finds): the trial's device and layers, ``none`` and 0 for a CPU cell. The prompt is
    one word (the generator joins the words after its options with spaces, so one quoted word
    arrives as written). Like a trial's launch, the build's ``lib/`` goes on
    ``LD_LIBRARY_PATH``.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    return launch_line([binary, "-m", model, "-n", str(tokens), *knobs.argv(), prompt],
                       lib_dir, env)


def _text(data: bytes) -> str:
    """Bytes as a device shell hands them back: UTF-8, invalid bytes replaced."""
    return data.decode("utf-8", errors="replace")


def continuation(stdout: str, echo: bytes) -> str | None:
    """What the generator printed after the prompt's echo (its final newline dropped), or None
    when the echo is not there (another tokenizer, or no output at all)."""
    shown = _text(echo)
    at = stdout.find(shown)
    if at < 0:
        return None
    text = stdout[at + len(shown):]
    return text[:-1] if text.endswith("\n") else text


def agreed_tokens(pieces: Sequence[bytes], text: str) -> int:
    """How many of the reference's tokens, from the first, ``text`` reproduces: the largest k
    such that ``text`` starts with the first k pieces joined.

    Texts compare as the device shell decodes them (invalid UTF-8 replaced). A character split
    over two tokens is half a character after the first: that prefix does not compare, the
    next one does, so the search goes down from all the pieces rather than up from none.
    """
    for count in range(len(pieces), 0, -1):
        if text.startswith(_text(b"".join(pieces[:count]))):
            return count
    return 0


def _show(text: str) -> str:
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...")


def compare(reference: Reference, stdout: str, min_agree: int) -> Verdict:
    """The verdict on a generator's output (text as the device shell returns it) against the
    reference (see the module's tolerance). ``min_agree`` reference tokens must agree (all of
    them when the reference generated fewer)."""
    if min_agree < 1:
        raise ValueError(f"min_agree must be >= 1, got {min_agree}")
    total = len(reference.pieces)
    required = min(min_agree, total)
    text = continuation(stdout, reference.echo)
    if text is None:
        return Verdict(Status.MISMATCH, reference.identity, 0, total,
                       f"the output does not echo the prompt as the reference tokenises it "
                       f"(got {_show(stdout)}, expected it to start with "
                       f"{_show(_text(reference.echo))})")
    agreed = agreed_tokens(reference.pieces, text)
    if agreed >= required:
        return Verdict(Status.MATCH, reference.identity, agreed, total,
                       f"{agreed} of {total} greedy tokens agree (needs {required})")
    expected = _text(b"".join(reference.pieces))
    shared = _text(b"".join(reference.pieces[:agreed]))
    return Verdict(Status.MISMATCH, reference.identity, agreed, total,
                   f"{agreed} of {total} greedy tokens agree (needs {required}), after "
                   f"{_show(shared)} the build wrote {_show(text[len(shared):])}, the reference "
                   f"{_show(expected[len(shared):])}")


def invalid_reason(status: str | None, reference: str | None, detail: str | None) -> str | None:
    """The validity gate's reason for a trial whose output check is a mismatch, else None."""
    if status != Status.MISMATCH:
        return None
    against = reference or "the reference"
    # validity reasons are "; "-joined: one reason never holds that separator itself
    text = (detail or "no detail").replace("; ", ", ")
    return f"output mismatch against {against}: {text}"


def judge(reference: Reference, exit_code: int, stdout: str, stderr: str,
          min_agree: int) -> Verdict:
    """The verdict on one generator run: an error when it failed or printed nothing (no verdict
    on the build), else ``compare``."""
    if exit_code != 0:
        tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no stderr"
        return Verdict(Status.ERROR, reference.identity, detail=(
            f"{GENERATOR} exited {exit_code}: {tail}"))
    if not stdout.strip():
        return Verdict(Status.ERROR, reference.identity, detail=f"{GENERATOR} printed nothing")
    return compare(reference, stdout, min_agree)
