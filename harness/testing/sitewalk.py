"""Walk a built dashboard as a person does, in headless Chromium, and check every link.

Used by the browser test (tests/site) and by the site benchmark on the synthetic year
(scripts/bench_site.py): ``walk`` opens the index from the folder (``file://``), follows its
links to a night, a phone, one of the phone's configurations, a build and the night's report
(when the site has it), and returns each page's DOM after its scripts ran with the console
lines Chromium logged; ``broken_links`` lists every relative link of every page that points at
no file.
"""

from __future__ import annotations

import html.parser
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

CHROMIUM = Path("/usr/bin/chromium")


class Links(html.parser.HTMLParser):
    """Every href and src of one page, and the text of its elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.refs.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(text: str) -> Links:
    links = Links()
    links.feed(text)
    links.close()
    return links


def dom(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, and the console lines Chromium logged."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--allow-file-access-from-files", "--dump-dom", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium could not open {page}: {done.stderr[-2000:]}")
    console = [line for line in done.stderr.splitlines()
               if ":CONSOLE" in line or "Uncaught" in line]
    return done.stdout, console


def target(page: Path, ref: str) -> Path:
    """The file a relative link of ``page`` points at."""
    return (page.parent / unquote(ref.split("#", 1)[0])).resolve()


def first_link(text: str, page: Path, pattern: str) -> Path | None:
    """The first relative link of ``text`` (the DOM of ``page``) matching ``pattern`` (None
    when there is none); an AssertionError when its file is missing."""
    for ref in parse(text).refs:
        if re.search(pattern, ref) and "://" not in ref:
            found = target(page, ref)
            assert found.is_file(), f"{page.name} links to {ref}, which is not there"
            return found
    return None


def link(text: str, page: Path, pattern: str) -> Path:
    """``first_link``, which must be there (an AssertionError otherwise)."""
    found = first_link(text, page, pattern)
    assert found is not None, f"{page.name} has no link matching {pattern!r}"
    return found


@dataclass(frozen=True)
class Visit:
    kind: str
    page: Path
    dom: str
    console: list[str]


def walk(site: Path, work: Path) -> list[Visit]:
    """Index, then a phone and its first configuration, the latest night and one of its builds,
    and the night's full report when the night page links one (``--reports``), each opened in
    Chromium from the link the page before shows."""
    index = site.resolve() / "index.html"  # a file:// address needs an absolute path
    seen = [Visit("index", index, *dom(index, work / "p0"))]
    night = link(seen[0].dom, index, r"(^|/)nights/")
    device = link(seen[0].dom, index, r"(^|/)devices/")
    seen.append(Visit("device", device, *dom(device, work / "p1")))
    config = link(seen[-1].dom, device, r"(^|/)configs/")
    seen.append(Visit("config", config, *dom(config, work / "p2")))
    seen.append(Visit("night", night, *dom(night, work / "p3")))
    night_dom = seen[-1].dom
    build = link(night_dom, night, r"(^|/)builds/")
    seen.append(Visit("build", build, *dom(build, work / "p4")))
    report = first_link(night_dom, night, r"(^|/)reports/nightly-[^/]*\.html$")
    if report is not None:
        seen.append(Visit("report", report, *dom(report, work / "p5")))
    return seen


def broken_links(site: Path) -> list[str]:
    """``page -> link`` for every relative href or src of the site's pages with no file."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        for ref in parse(page.read_text(encoding="utf-8")).refs:
            if "://" in ref or ref.startswith(("#", "mailto:", "data:")):
                continue
            if not target(page, ref).is_file():
                broken.append(f"{page.relative_to(site)} -> {ref}")
    return broken
