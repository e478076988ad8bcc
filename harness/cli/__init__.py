"""The ``harness`` command line: a thin click layer over the library.

Each sub-module of ``harness.cli`` defines its commands and lists them in ``COMMANDS``; this module
collects them into one group and turns every ``HarnessError`` into one clean line and its exit
code (2 for bad input), never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from harness import __version__
from harness.errors import HarnessError
from harness.interrupt import Interrupted, interruptible

#: Each command's module: a command imports its own module only when it is run (importing them
#: all took 1.5 s before any command started; tests/test_cli.py holds this to their COMMANDS).
COMMAND_MODULE = {
    "plan": "plan", "run": "run", "report": "report", "energy": "energy", "models": "models",
    "sim": "sim", "devices": "devices", "demo": "demo", "farm": "farm", "bisect": "bisect",
    "store": "store", "site": "site", "doctor": "doctor", "capture": "doctor",
    "build": "build", "builds": "build",
    **dict.fromkeys(("compare", "history", "recommend", "quality", "export", "import",
                     "nightly", "noise"), "analysis"),
}


SKIPS_LISTED = "harness.store_skips_listed"  # ctx.meta: the command listed them itself


class UserError(click.ClickException):
    """A HarnessError on its way out: one line, exit code 2."""

    exit_code = 2


class HarnessGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULE, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in COMMAND_MODULE:
            _register(COMMAND_MODULE[cmd_name])
            found = super().get_command(ctx, cmd_name)
        return found

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """SIGTERM and SIGHUP stop a command as Ctrl-C does (harness.interrupt): the phones,
        servers and compiles it started are stopped on the way out."""
        with interruptible():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        mark = _store_mark()
        try:
            return super().invoke(ctx)
        except HarnessError as error:
            raise UserError(str(error)) from error
        except Interrupted as stop:
            click.echo(f"harness: stopped by {stop}; what it started has been stopped",
                       err=True)
            raise click.exceptions.Exit(128 + stop.signum) from stop
        finally:
            if not ctx.meta.get(SKIPS_LISTED):
                _name_skipped_parts(mark)


def _store_mark() -> int:
    store = sys.modules.get("harness.store")  # not imported yet: nothing read, nothing skipped
    return store.skip_mark() if store is not None else 0


def _name_skipped_parts(mark: int) -> None:
    """Every store part the command's reads left out, one line each on stderr."""
    store = sys.modules.get("harness.store")
    if store is None:
        return
    for part in store.skipped_since(mark):
        click.echo(f"warning: store part left out: {part.line()} (harness store check lists "
                   "them all)", err=True)


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


def _register(name: str) -> None:
    """Add the commands of ``harness.cli.<name>`` (a command already there is kept: a test's)."""
    module = importlib.import_module(f"harness.cli.{name}")
    for command in module.COMMANDS:
        if command.name not in main.commands:
            main.add_command(command)
