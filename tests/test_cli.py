"""Every command has help text with an example, and user errors never show a traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from harness.cli import main


def _all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # a lazy group's commands, each module imported
        command = group.get_command(ctx, name)
        assert command is not None, name
        path = f"{prefix} {name}".strip()
        found.append((path, command))
        if isinstance(command, click.Group):
            found.extend(_all_commands(command, path))
    return found


@pytest.mark.parametrize("path", [p for p, _ in _all_commands(main)])
def test_every_command_has_help_with_an_example(path: str) -> None:
    result = CliRunner().invoke(main, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"'harness {path} --help' shows no example"


def test_version_prints_the_package_version() -> None:
    from harness import __version__

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_each_command_is_found_in_the_module_that_defines_it() -> None:
    """``harness.cli.COMMAND_MODULE`` names every command's module, so a command imports only
    its own: the map must list each module's COMMANDS, no more and no fewer."""
    import importlib

    from harness.cli import COMMAND_MODULE

    defined = {command.name: module for module in sorted(set(COMMAND_MODULE.values()))
               for command in importlib.import_module(f"harness.cli.{module}").COMMANDS}
    assert defined == COMMAND_MODULE


def test_starting_a_command_imports_only_its_own_module() -> None:
    import subprocess
    import sys

    code = ("import sys; from harness.cli import main; main.get_command(None, 'recommend'); "
            "print(sorted(m for m in ('harness.cli.run', 'harness.run.runner', "
            "'harness.cli.farm', 'harness.cli.analysis') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["['harness.cli.analysis']"]
