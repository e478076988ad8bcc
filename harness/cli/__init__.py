"""The ``harness`` command line: a thin click layer over the library.

Each sub-module of ``harness.cli`` defines its commands and lists them in ``COMMANDS``; this module
collects them into one group and turns every ``HarnessError`` into one clean line and its exit
code (2 for bad input), never a traceback.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from harness import __version__
from harness.errors import HarnessError

# Sub-modules of harness.cli whose COMMANDS are registered, in --help order.
COMMAND_MODULES = [
    "plan", "run", "analysis", "report", "energy", "models", "sim", "devices", "build", "demo",
    "farm", "bisect",
]


class UserError(click.ClickException):
    """A HarnessError on its way out: one line, exit code 2."""

    exit_code = 2


class HarnessGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HarnessError as error:
            raise UserError(str(error)) from error


@click.group(cls=HarnessGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="harness")
def main() -> None:
    """Benchmark and regression-test LLM inference engines on Android phones.

    \b
    Example:
      harness sim start --count 2
      harness plan matrices/smoke.yaml --device midrange-8gb
      harness run matrices/smoke.yaml --devices all
      harness compare --baseline host-release --candidate host-slow --gate tg_tps:-3%
      harness report -o reports/today.html
    """


def _register() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"harness.cli.{name}")
        for command in module.COMMANDS:
            main.add_command(command)


_register()
