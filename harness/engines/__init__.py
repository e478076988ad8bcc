"""Engine adapters: a cell in, an argv out; engine output in, measurements out.

``get_engine`` maps a matrix's engine name to its adapter: ``llama-bench``, ``llama-cpp-python``
(the in-process bench), MNN's ``mnn-llm-bench``, LiteRT-LM's ``litert-lm`` and
``litert-lm-advanced``, ExecuTorch's ``executorch-llama``, or a path to a YAML-declared generic
engine. The protocol is in
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
    from harness.engines.generic import GenericEngine
    from harness.engines.generic_yaml import load_generic_engine

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

BUILTIN = ("llama-bench", "llama-cpp-python", "mnn-llm-bench", "litert-lm", "litert-lm-advanced",
           "executorch-llama")


def __getattr__(name: str) -> Any:
    if name == "GenericEngine":
        from harness.engines.generic import GenericEngine

        return GenericEngine
    if name == "load_generic_engine":
        from harness.engines.generic_yaml import load_generic_engine

        return load_generic_engine
    raise AttributeError(f"module 'harness.engines' has no attribute {name!r}")


@cache
def get_engine(name: str) -> Engine:
    """The adapter for an engine name, or for a generic engine's YAML file."""
    if name == "llama-bench":
        return LlamaBench()
    if name == "llama-cpp-python":
        return PyBench()
    # engines beyond llama.cpp, imported on first use (the package pushed to phones for
    # llama-cpp-python cells holds only what that bench needs)
    if name == "mnn-llm-bench":
        from harness.engines.mnn import MnnLlmBench

        return MnnLlmBench()
    if name in ("litert-lm", "litert-lm-advanced"):
        from harness.engines.litert_lm import LITERT_LM, LITERT_LM_ADVANCED

        return LITERT_LM if name == "litert-lm" else LITERT_LM_ADVANCED
    if name == "executorch-llama":
        from harness.engines.executorch import ExecutorchLlama

        return ExecutorchLlama()
    if name.endswith((".yaml", ".yml")):
        from harness.engines.generic_yaml import load_generic_engine

        return load_generic_engine(Path(name))
    raise ConfigError(
        f"unknown engine {name!r}; use {', '.join(BUILTIN)} or a generic engine's .yaml file"
    )
