"""``harness site build`` on the command line: its summary, --json, and bad input refused with
one line, exit 2 and nothing of an existing site lost."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from harness.testing.synthstore import SynthSpec, write_synthetic_store

SPEC = SynthSpec(devices=1, nights=4, reps=3, quants=("Q4_0",), kv_types=("f16",))


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["site", "build", *args])
    return result.exit_code, result.stdout, result.stderr


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(main, ["site", "build", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "harness site build --results" in result.output


def test_build_then_json_summary(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    code, out, _ = _run("--results", str(store), "-o", str(site), "--no-recommend")
    assert code == 0 and out.startswith(f"site: {site} (") and "written" in out
    code, out, _ = _run("--results", str(store), "-o", str(site), "--no-recommend", "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["written"] == 0 and summary["unchanged"] > 5 and summary["nights"] == 4
    assert summary["seconds"] >= 0


def test_not_a_store_is_one_line_and_the_site_is_untouched(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    assert _run("--results", str(store), "-o", str(site), "--no-recommend")[0] == 0
    before = _files(site)
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    code, out, err = _run("--results", str(empty), "-o", str(site))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "not a results store" in err
    assert _files(site) == before


def test_an_output_folder_holding_other_files_is_refused(tmp_path: Path) -> None:
    store, other = tmp_path / "results", tmp_path / "www"
    write_synthetic_store(store, SPEC)
    other.mkdir()
    (other / "index.html").write_text("<p>someone else's site</p>")
    (other / "site.json").write_text(json.dumps({"pages": {}}))  # not ours: no generator
    before = _files(other)
    code, out, err = _run("--results", str(store), "-o", str(other))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no site.json of a site built" in err
    assert _files(other) == before
    plain = tmp_path / "file.txt"
    plain.write_text("x")
    code, _, err = _run("--results", str(store), "-o", str(plain))
    assert code == 2 and len(err.strip().splitlines()) == 1 and plain.read_text() == "x"
