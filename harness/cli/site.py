"""``harness site build``: the static farm dashboard (harness.site)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("site")
def site() -> None:
    """The static farm dashboard: HTML pages over the results store.

    \b
    Example:
      harness site build --results results -o site/
    """


@site.command("build")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True, help="Results store to read.")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Site folder: new, empty, or a site this command built before (only the "
                   "pages whose inputs changed are written again).")
@click.option("--reports", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder of the nightly reports and alert documents (`harness nightly`'s "
                   "reports-dir): each night's are copied in and linked from its page.")
@click.option("--title", default="Farm dashboard", show_default=True, help="Site title.")
@click.option("--base-url", default=None, metavar="URL",
              help="Where the site is published, for absolute links in the Atom feed "
                   "[default: links relative to the feed].")
@click.option("--baseline", "references", multiple=True, metavar="BUILD",
              help="A reference build the farm runs every night beside the build under test "
                   "(`harness nightly --baseline`): kept out of the configurations' lines and "
                   "the nights' main builds, and the baseline every other build is compared "
                   "with, night by night. Repeat for several; remembered by the site "
                   "[default: the site's own].")
@click.option("--no-recommend", is_flag=True,
              help="Leave out the ranked configurations of device pages (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def build(results: Path, output: Path, reports: Path | None, title: str, base_url: str | None,
          references: tuple[str, ...], no_recommend: bool, as_json: bool) -> None:
    """Build the static farm dashboard, or bring it up to date after a new night.

    Pages: index (the latest night: flagged phones, regressions and improvements with 95% CIs,
    change points, failures, the last 30 nights per phone), one per phone, per device x config x
    engine (the metric over time, change points with a `harness bisect` line), per night and
    per build; beside them index.json (every page, for tools and the search box) and
    alerts.atom. The site works from file:// and any static web server: nothing is fetched.
    Pages whose inputs did not change since the last build are not written again.

    \b
    Example:
      harness site build --results results -o site/
      harness site build --results results --reports reports -o /var/www/farm --json
      harness site build --results results -o site/ --baseline release
    """
    from harness.site.build import build_site

    result = build_site(results, output, reports=reports, title=title, base_url=base_url,
                        recommend=not no_recommend, references=references or None)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    click.echo(f"site: {output} ({len(result.written)} written, {len(result.unchanged)} "
               f"unchanged, {result.nights} nights, {result.seconds:.1f} s); open "
               f"{output / 'index.html'}")


COMMANDS: list[click.Command] = [site]
