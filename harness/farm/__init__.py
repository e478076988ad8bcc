"""The phone farm: ``harness run`` on Dask distributed, one single-threaded worker per phone.

Dask is an optional extra (``pip install 'harness[farm]'``). Only modules of this package import
``distributed``, and only inside functions, so ``harness`` itself (and its CLI) loads without it;
asking for the farm without it is a clean ``FarmError`` (exit code 2), never a traceback.
"""

from __future__ import annotations

from types import ModuleType

from harness.errors import HarnessError

INSTALL_HINT = "pip install 'harness[farm]'"


class FarmError(HarnessError):
    """The farm cannot be used: Dask is missing, the scheduler is unreachable, ..."""


def require_distributed() -> ModuleType:
    """``distributed``, or a FarmError that says how to install it."""
    try:
        import distributed
    except ImportError as error:
        raise FarmError(
            f"the farm backend needs Dask distributed, which is not installed: {INSTALL_HINT}"
        ) from error
    return distributed
