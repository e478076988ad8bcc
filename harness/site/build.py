"""Build the site into a folder, incrementally; the only module here that touches files.

The rule: every output (page, JSON index, feed, copied report) has a digest of what it is made
from: for a page, its data dict (``model``) and ``render.RENDER_VERSION``; for a copied file,
its bytes. ``site.json`` (the manifest) maps each output's site path to that digest. An output
whose digest is the manifest's, and whose file is there, is not written again; any other is
written to a temporary file beside it and renamed into place, and the manifest is replaced the
same way, last. Costly figures (comparisons, recommendations) are cached under
``.harness-site/cache/`` by the digest of their input rows, so a morning computes only those a
new night touched; entries no build used are removed.

The output folder must be new, empty, or a site this command built (its ``site.json`` says
so); anything else is refused with one line before a single file is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.frames import load_trials
from harness.analysis.nightly import alerts_path
from harness.errors import ConfigError, StoreError
from harness.site import feed, paths
from harness.site.model import SCHEMA_VERSION, SiteModel, digest, recommend_json
from harness.site.render import RENDER_VERSION, render_page

MANIFEST = "site.json"
GENERATOR = "harness site"
CACHE = ".harness-site/cache"


@dataclass(frozen=True)
class BuildResult:
    output: Path
    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    seconds: float
    nights: int
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"output": str(self.output), "written": len(self.written),
                "unchanged": len(self.unchanged), "pages_written": list(self.written),
                "nights": self.nights, "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}


def write_atomic(path: Path, content: str | bytes) -> None:
    """``content`` at ``path`` via a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    data = content.encode("utf-8") if isinstance(content, str) else content
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_manifest(out: Path) -> dict[str, str]:
    """The page digests of the site in ``out`` ({} for a new or empty folder); a ConfigError
    when ``out`` holds something that is not a site of ours."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"-o {out}: is a file, not a folder: name a new or empty folder, or a "
                          "site built by `harness site build`")
    if not out.is_dir() or not any(out.iterdir()):
        return {}
    manifest = out / MANIFEST
    refuse = (f"-o {out}: the folder holds files but no {MANIFEST} of a site built by "
              "`harness site build`: name a new or empty folder (nothing was written)")
    if not manifest.is_file():
        raise ConfigError(refuse)
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(refuse) from None
    if not isinstance(data, dict) or data.get("generator") != GENERATOR \
            or not isinstance(data.get("pages"), dict):
        raise ConfigError(refuse)
    return {str(k): str(v) for k, v in data["pages"].items()}


class DiskMemo:
    """Computed JSON values by key, one file each under ``folder``; remembers what was used."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.used: set[str] = set()

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        self.used.add(key)
        path = self.folder / f"{key}.json"
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                pass
        value = compute()
        write_atomic(path, json.dumps(value, sort_keys=True, allow_nan=False))
        return value

    def prune(self) -> None:
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("*.json"):
            if path.stem not in self.used:
                path.unlink()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def attachments(reports: Path | None, nights: list[str]
                ) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """Per night, the dated report and alert document found in ``reports`` (as the night page
    shows them), and the files to copy into the site by site path."""
    extras: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    if reports is None:
        return extras, files
    if not reports.is_dir():
        raise ConfigError(f"--reports {reports}: no such folder")
    for night in nights:
        found: dict[str, Any] = {}
        report = reports / f"nightly-{night}.html"
        if report.is_file():
            found["report"] = files_key = f"reports/nightly-{night}.html"
            files[files_key] = report
        alert = alerts_path(reports, night)
        if alert.is_file():
            try:
                doc = json.loads(alert.read_text(encoding="utf-8"))
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                key = f"alerts/nightly-{night}-alerts.json"
                files[key] = alert
                found["alerts"] = {"path": key, "counts": doc.get("counts") or {},
                                   "regressions": list(doc.get("regressions") or [])[:50]}
        if found:
            extras[night] = found
    return extras, files


Output = tuple[str, Any, Callable[[], str | bytes]]  # (site path, digest input, content)


def _outputs(model: SiteModel, title: str, base_url: str | None,
             files: dict[str, Path]) -> Iterator[Output]:
    """Every output of the site: its path, what its digest is made of, and how to make it."""
    def page(path: str, data: dict[str, Any]) -> Output:
        return path, data, lambda: render_page(path, data, title)

    for serial in model.devices:
        yield page(paths.device_page(serial), model.device(serial))
    for key in sorted(model.series):
        yield page(paths.config_page(*key), model.config(key))
    for night in model.nights:
        yield page(paths.night_page(night), model.night(night))
    for build in model.builds:
        yield page(paths.build_page(build), model.build(build))
    yield page("index.html", model.index())
    yield page("search.html", {"kind": "search"})
    index = model.search_index()
    text = json.dumps(index, indent=1, sort_keys=True, ensure_ascii=False)
    yield "index.json", index, lambda: text + "\n"
    script = json.dumps(index, sort_keys=True).replace("<", "\\u003c").replace(
        ">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace(
        "\u2029", "\\u2029")
    yield "search-index.js", index, lambda: f"window.HARNESS_SITE_INDEX = {script};\n"
    atom = feed.atom(model, title, base_url)
    yield "alerts.atom", atom, lambda: atom
    for path, source in sorted(files.items()):
        yield path, _file_digest(source), source.read_bytes


def build_site(results: Path, out: Path, *, reports: Path | None = None,
               title: str = "Farm dashboard", base_url: str | None = None,
               recommend: bool = True) -> BuildResult:
    """Build (or bring up to date) the site of ``results`` in ``out``; see the module
    docstring."""
    start = time.perf_counter()
    if not (results / "trials").is_dir():
        raise StoreError(f"--results {results}: not a results store (no trials/ folder); pass "
                         "the folder `harness run` writes to")
    old = read_manifest(out)
    frame = load_trials(results)
    loaded = time.perf_counter()
    memo = DiskMemo(out / CACHE)
    model = SiteModel(frame, memo, recommend_json if recommend else None)
    extras, files = attachments(reports, model.nights)
    model.extras = extras
    modelled = time.perf_counter()
    pages: dict[str, str] = {}
    written, unchanged = [], []
    out.mkdir(parents=True, exist_ok=True)
    for path, inputs, make in _outputs(model, title, base_url, files):
        value = digest([SCHEMA_VERSION, RENDER_VERSION, title, base_url, inputs])
        pages[path] = value
        if old.get(path) == value and (out / path).is_file():
            unchanged.append(path)
            continue
        write_atomic(out / path, make())
        written.append(path)
    kept = {p: d for p, d in old.items() if p not in pages and (out / p).is_file()}
    manifest = {"generator": GENERATOR, "schema_version": SCHEMA_VERSION,
                "render_version": RENDER_VERSION, "latest_night": model.latest,
                "pages": dict(sorted({**kept, **pages}.items()))}
    text = json.dumps(manifest, indent=1) + "\n"
    target = out / MANIFEST
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        write_atomic(target, text)
    memo.prune()
    end = time.perf_counter()
    return BuildResult(out, tuple(written), tuple(unchanged), end - start, len(model.nights),
                       {"load": loaded - start, "model": modelled - loaded,
                        "pages": end - modelled})

