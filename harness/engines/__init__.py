"""Engine adapters: a cell in, an argv out; engine output in, measurements out.

``get_engine`` maps a matrix's engine name to its adapter: ``llama-bench``, ``llama-cpp-python``
(the in-process bench) or a path to a YAML-declared generic engine. The protocol is in
``harness.engines.base`` and described in docs/engines.md.

The generic adapter (and the yaml it needs) is imported on first use: this package is also pushed
to phones for ``llama-cpp-python`` cells, whose Python may have nothing but llama_cpp.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.engines.base import Engine, Measurement, Record
from harness.engines.llama_bench import Dialect, LlamaBench, parse_output
from harness.engines.pybench import PyBench
from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.engines.generic import GenericEngine, load_generic_engine

__all__ = [
    "BUILTIN",
    "Dialect",
    "Engine",
    "GenericEngine",
    "LlamaBench",
    "Measurement",
    "PyBench",
    "Record",
    "get_engine",
    "load_generic_engine",
    "parse_output",
]

BUILTIN = ("llama-bench", "llama-cpp-python")


def __getattr__(name: str) -> Any:
    if name in ("GenericEngine", "load_generic_engine"):
        from harness.engines import generic

        return getattr(generic, name)
    raise AttributeError(f"module 'harness.engines' has no attribute {name!r}")


@cache
def get_engine(name: str) -> Engine:
    """The adapter for an engine name, or for a generic engine's YAML file."""
    if name == "llama-bench":
        return LlamaBench()
    if name == "llama-cpp-python":
        return PyBench()
    if name.endswith((".yaml", ".yml")):
        from harness.engines.generic import load_generic_engine

        return load_generic_engine(Path(name))
    raise ConfigError(
        f"unknown engine {name!r}; use {', '.join(BUILTIN)} or a generic engine's .yaml file"
    )
