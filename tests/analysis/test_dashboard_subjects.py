"""The dashboard removes the pages of subjects the store no longer holds (issue 48, item 9)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.site import paths
from harness.site.build import MANIFEST, build_site
from harness.store import write_part

from .factory import START, cell, trial


def test_a_phone_that_left_the_store_leaves_the_dashboard(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_part(store, "trials", [trial(cell(), serial="SER1", rep=i) for i in range(3)], "r1",
               when=START)
    gone = write_part(store, "trials", [trial(cell(), serial="SER2", rep=i) for i in range(3)],
                      "r2", when=START)
    build_site(store, site, recommend=False)
    page = site / paths.device_page("SER2")
    assert page.is_file()
    outside = tmp_path / "keep.txt"
    outside.write_text("not the site's")
    manifest = json.loads((site / MANIFEST).read_text())
    manifest["pages"]["../keep.txt"] = "0" * 64  # a manifest never removes what is not the site's
    (site / MANIFEST).write_text(json.dumps(manifest))
    assert gone is not None
    gone.unlink()  # the phone's trials pruned from the store
    build_site(store, site, recommend=False)
    assert not page.exists()
    assert (site / paths.device_page("SER1")).is_file()
    assert paths.device_page("SER2") not in json.loads((site / MANIFEST).read_text())["pages"]
    assert outside.read_text() == "not the site's"
