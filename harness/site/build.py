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

import contextlib
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.monitor import with_stored_energy
from harness.analysis.nightly import alerts_path
from harness.errors import ConfigError, StoreError
from harness.site import feed, paths
from harness.site.model import COLUMNS, SCHEMA_VERSION, SiteModel, digest, recommend_json
from harness.site.render import RENDER_VERSION, render_page
from harness.store import part_files, read_arrow

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
    return {str(k): str(v) for k, v in _manifest(out).get("pages", {}).items()}


def manifest_references(out: Path) -> tuple[str, ...]:
    """The reference builds the site in ``out`` was last built with (() for a new folder)."""
    found = _manifest(out).get("references", [])
    return tuple(str(r) for r in found) if isinstance(found, list) else ()


def _manifest(out: Path) -> dict[str, Any]:
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
    return data


class DiskMemo:
    """Computed JSON values by key, one file each under ``folder``; remembers what was used."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.used: set[str] = set()
        self.pending: dict[str, Future[Any]] = {}
        self._peeked: dict[str, Any] = {}  # values ``peek`` read, so ``get`` reads them once

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        self.used.add(key)
        if key in self._peeked:
            return self._peeked.pop(key)
        if key in self.pending:  # computed elsewhere (a process of the build's pool)
            future = self.pending.pop(key)
            compute = future.result
        path = self.folder / f"{key}.json"
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                pass
        value = compute()
        write_atomic(path, json.dumps(value, sort_keys=True, allow_nan=False))
        return value

    def peek(self, key: str) -> Any | None:
        path = self.folder / f"{key}.json"
        if not path.is_file():
            return None
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return None
        self.used.add(key)
        self._peeked[key] = value
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


def site_trials(results: Path) -> pd.DataFrame:
    """The columns of every trial the pages read (``model.COLUMNS``), not the store's hundred."""
    # one chunk per column, not one per part: a year's 365 parts made every row selection
    # (a comparison's, a recommendation's) walk 365 chunks per column
    frame = read_arrow(results, "trials", columns=COLUMNS).combine_chunks().to_pandas()
    if frame.empty:
        raise StoreError(f"--results {results}: the store holds no trials")
    return frame


def _near(results: Path, first: str, last: str) -> list[Path]:
    """The trials parts whose date partition is within a day of ``first``..``last`` (a night is
    the date its trials started; a run's partition is its own start's date)."""
    low = (date.fromisoformat(first) - timedelta(days=1)).isoformat()
    high = (date.fromisoformat(last) + timedelta(days=1)).isoformat()
    out = []
    for path in part_files(results, "trials"):
        day = path.parent.name.removeprefix("date=")
        if not path.parent.name.startswith("date=") or low <= day <= high:
            out.append(path)
    return out


def recommend_from_store(results: Path, serial: str, build: str,
                         nights: list[str]) -> dict[str, Any]:
    """``recommend_json`` of the device's trials of ``build`` read whole (every column, the
    energy table applied) from the parts of ``nights``, the nights the build ran."""
    filters: list[tuple[str, str, object]] = [("device_serial", "=", serial),
                                              ("build_id", "=", build)]
    table = read_arrow(results, "trials", files=_near(results, nights[0], nights[-1]),
                       filters=filters)
    frame = with_stored_energy(results, table.to_pandas())
    return recommend_json(frame, serial, build)


#: From this many trials a build computes the recommendations its memo lacks in a process of
#: its own, beside the rest (the change points, the pages) on the other core; below, the
#: process's start would cost more than it saves.
POOL_FROM_TRIALS = 50_000


def start_recommendations(results: Path, model: SiteModel, memo: DiskMemo,
                          pool: Executor) -> None:
    """Submit every recommendation the memo lacks to ``pool``; the memo hands out each result
    when a device page asks for it."""
    for serial, build, key in model.recommendations_missing():
        memo.pending[key] = pool.submit(recommend_from_store, results, serial, build,
                                        model.nights_of(build))


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
               recommend: bool = True, references: tuple[str, ...] | None = None
               ) -> BuildResult:
    """Build (or bring up to date) the site of ``results`` in ``out``; see the module
    docstring. ``references``: builds run every night beside the build under test (kept out
    of the lines, the baseline of every other build); None keeps the site's own (its
    manifest's), () clears them."""
    start = time.perf_counter()
    if not (results / "trials").is_dir():
        raise StoreError(f"--results {results}: not a results store (no trials/ folder); pass "
                         "the folder `harness run` writes to")
    old = read_manifest(out)
    if references is None:
        references = manifest_references(out)
    frame = site_trials(results)
    loaded = time.perf_counter()
    memo = DiskMemo(out / CACHE)
    model = SiteModel(frame, memo, functools.partial(recommend_from_store, results)
                      if recommend else None, references=references)
    extras, files = attachments(reports, model.nights)
    model.extras = extras
    missing = model.recommendations_missing()
    pooled = len(frame) >= POOL_FROM_TRIALS and bool(missing)
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) if pooled \
            else contextlib.nullcontext() as pool:
        if pool is not None:
            start_recommendations(results, model, memo, pool)
        modelled = time.perf_counter()
        result = _write(model, memo, out, old, title, base_url, files)
    end = time.perf_counter()
    return BuildResult(out, result[0], result[1], end - start, len(model.nights),
                       {"load": loaded - start, "model": modelled - loaded,
                        "pages": end - modelled})


def _write(model: SiteModel, memo: DiskMemo, out: Path, old: dict[str, str], title: str,
           base_url: str | None, files: dict[str, Path]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Write every output whose digest changed, remove the pages of subjects the store no
    longer holds (only pages the manifest names: the site's own), then the manifest; prune
    the memo."""
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
    inside = out.resolve()
    for gone in sorted(set(old) - set(pages)):  # its subject left the store: so does the page
        target = (out / gone).resolve()
        if target.is_relative_to(inside) and target != inside:
            target.unlink(missing_ok=True)
    manifest = {"generator": GENERATOR, "schema_version": SCHEMA_VERSION,
                "render_version": RENDER_VERSION, "latest_night": model.latest,
                "references": list(model.references), "pages": dict(sorted(pages.items()))}
    text = json.dumps(manifest, indent=1) + "\n"
    target = out / MANIFEST
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        write_atomic(target, text)
    memo.prune()
    return tuple(written), tuple(unchanged)

