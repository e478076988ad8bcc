"""Every command has help text with an example, and user errors never show a traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from harness.cli import main


def _all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
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
