"""CLI commands for this area (filled in by its issue)."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
