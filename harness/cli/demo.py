"""``harness demo``: the README's first command, end to end on this machine."""

from __future__ import annotations

import click

from harness.cli.plan import COMMANDS as PLAN_COMMANDS


@click.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Run the demo: plan the smoke matrix for each device profile.

    \b
    Example:
      harness demo
    """
    plan = next((c for c in PLAN_COMMANDS if c.name == "plan"), None)
    if plan is None:
        click.echo("demo: nothing to run yet")
        return
    ctx.invoke(plan, matrix="matrices/smoke.yaml")


COMMANDS: list[click.Command] = [demo]
