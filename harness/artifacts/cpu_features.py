"""Which CPU features a llama.cpp build was compiled for, derived from its cmake defines.

ggml's CPU backend picks its SIMD code paths at compile time from a handful of cmake options
(``ggml/CMakeLists.txt`` and ``ggml/src/ggml-cpu/CMakeLists.txt`` of the vendored llama.cpp):

- x86 (``GGML_NATIVE=OFF``): one ``-m`` flag per option, in ggml's order: ``GGML_SSE42``
  (``-msse4.2``), ``GGML_F16C``, ``GGML_FMA``, ``GGML_BMI2``, ``GGML_AVX``, ``GGML_AVX2``,
  ``GGML_AVX_VNNI``, ``GGML_AVX512`` (F/CD/VL/DQ/BW), ``GGML_AVX512_VBMI/VNNI/BF16`` and
  ``GGML_AMX_TILE/INT8/BF16``. SSE4.2, AVX, AVX2, BMI2, FMA and F16C default to ON only when
  native is off, cmake is not cross-compiling and ``SOURCE_DATE_EPOCH`` is not set (ggml's
  ``INS_ENB``); the others default to OFF.
- Arm (``GGML_NATIVE=OFF``): ``GGML_CPU_ARM_ARCH`` becomes ``-march=<value>``; without it the
  compiler's baseline (``armv8-a``: no dotprod, no fp16 arithmetic, no i8mm) applies unless a
  global ``-march``/``-mcpu`` is passed in ``CMAKE_C_FLAGS``. The features follow from the
  architecture version and its ``+ext``/``+noext`` modifiers as GCC and clang define them
  (``__ARM_FEATURE_DOTPROD`` etc.).
- ``GGML_CPU_KLEIDIAI`` (default OFF) adds Arm's KleidiAI micro-kernels.

The derivation is pure (tested against the cross compiler's own predefined macros), so a
manifest can say what a build was compiled for without running it on the target.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

X86_ARCHES = ("x86_64", "amd64", "i686", "i386")
ARM64_ARCHES = ("aarch64", "arm64", "arm64-v8a")

# (cmake option, feature name, compiler flags, default follows INS_ENB) in ggml's order.
_X86: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("GGML_SSE42", "sse42", ("-msse4.2",), True),
    ("GGML_F16C", "f16c", ("-mf16c",), True),
    ("GGML_FMA", "fma", ("-mfma",), True),
    ("GGML_BMI2", "bmi2", ("-mbmi2",), True),
    ("GGML_AVX", "avx", ("-mavx",), True),
    ("GGML_AVX2", "avx2", ("-mavx2",), True),
    ("GGML_AVX_VNNI", "avx_vnni", ("-mavxvnni",), False),
    ("GGML_AVX512", "avx512",
     ("-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw"), False),
    ("GGML_AVX512_VBMI", "avx512_vbmi", ("-mavx512vbmi",), False),
    ("GGML_AVX512_VNNI", "avx512_vnni", ("-mavx512vnni",), False),
    ("GGML_AVX512_BF16", "avx512_bf16", ("-mavx512bf16",), False),
    ("GGML_AMX_TILE", "amx_tile", ("-mamx-tile",), False),
    ("GGML_AMX_INT8", "amx_int8", ("-mamx-int8",), False),
    ("GGML_AMX_BF16", "amx_bf16", ("-mamx-bf16",), False),
)
X86_FEATURES = tuple(name for _, name, _, _ in _X86)
ARM_FEATURES = ("dotprod", "fp16", "i8mm", "sve", "sme")

_FALSE = {"", "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND"}
_ARCH_FLAG = re.compile(r"(?:^|\s)(-march=|-mcpu=)(\S+)")
_ARMV = re.compile(r"^armv(\d+)(?:\.(\d+))?-a$")


@dataclass(frozen=True)
class CpuFeatures:
    """What a build's CPU code was compiled for.

    ``arch``: ``x86_64`` or ``aarch64``. ``arch_flags``: the flags ggml-cpu is compiled with
    (``-march=armv8.2-a+dotprod+fp16``; ``-msse4.2 -mf16c ...``); empty means the compiler's
    baseline. ``features``: every known feature of that arch, on or off, in a fixed order.
    ``kleidiai``: Arm's KleidiAI kernels compiled in.
    """

    arch: str
    arch_flags: tuple[str, ...]
    features: tuple[tuple[str, bool], ...]
    kleidiai: bool = False

    def has(self, feature: str) -> bool:
        return dict(self.features).get(feature, False)

    @property
    def enabled(self) -> list[str]:
        return [name for name, on in self.features if on]

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch, "arch_flags": list(self.arch_flags),
            "features": dict(self.features), "kleidiai": self.kleidiai,
        }

    def summary(self) -> str:
        """One line for tables: ``aarch64 dotprod fp16`` / ``x86_64 sse42 f16c ... avx2``."""
        words = [self.arch, *self.enabled]
        if self.kleidiai:
            words.append("kleidiai")
        if len(words) == 1:
            words.append("baseline")
        return " ".join(words)


def cmake_bool(value: str | None, default: bool = False) -> bool:
    """CMake's truth: OFF/NO/FALSE/N/0/IGNORE/NOTFOUND/*-NOTFOUND/empty are false."""
    if value is None:
        return default
    text = value.strip().upper()
    return not (text in _FALSE or text.endswith("-NOTFOUND"))


def normalise_arch(machine: str) -> str:
    if machine in X86_ARCHES:
        return "x86_64"
    if machine in ARM64_ARCHES:
        return "aarch64"
    return machine


def derive_cpu_features(
    arch: str, defines: Mapping[str, str], env: Mapping[str, str] | None = None
) -> CpuFeatures:
    """The features of a build for ``arch`` configured with ``defines`` (``-DKEY=VALUE``).

    ``env`` is the environment cmake ran in (``SOURCE_DATE_EPOCH`` turns ggml's x86 defaults
    off); default ``os.environ``. A ``CMAKE_TOOLCHAIN_FILE`` means cross-compiling.
    """
    arch = normalise_arch(arch)
    env = os.environ if env is None else env
    kleidiai = cmake_bool(defines.get("GGML_CPU_KLEIDIAI"))
    native = cmake_bool(defines.get("GGML_NATIVE"), default=True)
    if arch == "x86_64":
        if native:
            return CpuFeatures(arch, ("-march=native",), tuple((n, False) for n in X86_FEATURES))
        cross = bool(defines.get("CMAKE_TOOLCHAIN_FILE"))
        ins_enb = not cross and "SOURCE_DATE_EPOCH" not in env
        flags: list[str] = []
        features: list[tuple[str, bool]] = []
        for option, name, option_flags, follows_ins_enb in _X86:
            on = cmake_bool(defines.get(option), default=ins_enb and follows_ins_enb)
            features.append((name, on))
            if on:
                flags.extend(option_flags)
        return CpuFeatures(arch, tuple(flags), tuple(features), kleidiai)
    if arch == "aarch64":
        arch_flags = _arm_arch_flags(defines)
        found = arm_features(arch_flags[-1] if arch_flags else "")
        return CpuFeatures(arch, arch_flags, tuple((n, found[n]) for n in ARM_FEATURES), kleidiai)
    return CpuFeatures(arch, (), (), kleidiai)


def _arm_arch_flags(defines: Mapping[str, str]) -> tuple[str, ...]:
    """``-march=GGML_CPU_ARM_ARCH``, else a global ``-march``/``-mcpu`` in CMAKE_C_FLAGS."""
    if cmake_bool(defines.get("GGML_NATIVE"), default=True):
        return ("-mcpu=native",)
    arm_arch = defines.get("GGML_CPU_ARM_ARCH", "").strip()
    if arm_arch:
        return (f"-march={arm_arch}",)
    found = _ARCH_FLAG.findall(defines.get("CMAKE_C_FLAGS", ""))
    if found:
        kind, value = found[-1]
        return (f"{kind}{value}",)
    return ()


def arm_features(flag: str) -> dict[str, bool]:
    """Features of an AArch64 ``-march=``/``-mcpu=`` flag (empty: the armv8-a baseline).

    Mandatory from: dotprod armv8.4-a, i8mm armv8.6-a (armv9.1-a); sve (and with it fp16)
    armv9-a; fp16 arithmetic is otherwise optional (``+fp16``, implied by ``+fp16fml``,
    ``+sve``, ``+sve2``).
    A ``-mcpu=<core>`` names no features: only its explicit ``+ext`` modifiers count.
    """
    value = flag.split("=", 1)[1] if "=" in flag else flag
    base, *modifiers = value.split("+") if value else ("armv8-a",)
    found = dict.fromkeys(ARM_FEATURES, False)
    match = _ARMV.match(base)
    if match:
        major, minor = int(match.group(1)), int(match.group(2) or 0)
        as_v8 = (8, minor + 5) if major == 9 else (major, minor)  # armv9.N-a extends armv8.(N+5)
        found["dotprod"] = as_v8 >= (8, 4)
        found["i8mm"] = as_v8 >= (8, 6)
        found["sve"] = found["fp16"] = major >= 9
    implies = {
        "dotprod": ("dotprod",), "i8mm": ("i8mm",), "fp16": ("fp16",), "fp16fml": ("fp16",),
        "sve": ("sve", "fp16"), "sve2": ("sve", "fp16"), "sme": ("sme",),
    }
    for modifier in modifiers:
        if modifier.startswith("no") and modifier[2:] in found:
            found[modifier[2:]] = False
            if modifier == "nofp16":  # GCC: +nofp16 also drops what needs it
                found["sve"] = False
        for feature in implies.get(modifier, ()):
            found[feature] = True
    return found


def cpu_features_from_dict(data: Any) -> CpuFeatures:
    """Inverse of ``to_dict``; raises ValueError naming the bad key."""
    if not isinstance(data, dict):
        raise ValueError("must be an object with arch, arch_flags, features, kleidiai")
    arch = data.get("arch")
    if not isinstance(arch, str):
        raise ValueError("key 'arch' must be a string")
    flags = data.get("arch_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError("key 'arch_flags' must be a list of strings")
    features = data.get("features", {})
    if not isinstance(features, dict) or not all(
        isinstance(k, str) and isinstance(v, bool) for k, v in features.items()
    ):
        raise ValueError("key 'features' must map feature names to true/false")
    kleidiai = data.get("kleidiai", False)
    if not isinstance(kleidiai, bool):
        raise ValueError("key 'kleidiai' must be true or false")
    return CpuFeatures(arch, tuple(flags), tuple(features.items()), kleidiai)
