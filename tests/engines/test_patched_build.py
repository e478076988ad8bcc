"""Patched host builds (the planted-bug build's machinery) and target-aware cache keys."""

from __future__ import annotations

import pytest

from harness.artifacts import cmake_build, patched
from harness.artifacts.cmake_build import cross_variant_key, host_variant_key
from harness.artifacts.patched import SourceEdit, apply_edits, patched_key
from harness.errors import BuildError

EDIT = SourceEdit("ggml/src/x.cpp", "i < n;", "i < n/4;")


def test_edits_replace_exactly_one_occurrence() -> None:
    texts = {EDIT.path: "for (i = 0; i < n; i++) {}", "other.c": "i < n;"}
    edited = apply_edits(texts, [EDIT])
    assert edited[EDIT.path] == "for (i = 0; i < n/4; i++) {}"
    assert edited["other.c"] == "i < n;"  # other files untouched
    assert texts[EDIT.path].count("i < n;") == 1  # the input is not changed


@pytest.mark.parametrize("text", ["no loop here", "i < n; i < n;"])
def test_an_absent_or_ambiguous_edit_fails_in_one_line(text: str) -> None:
    with pytest.raises(BuildError) as error:
        apply_edits({EDIT.path: text}, [EDIT])
    assert EDIT.path in str(error.value) and "\n" not in str(error.value)


def test_the_patched_key_follows_the_edits_and_the_name() -> None:
    key = patched_key("host-wrong", [EDIT])
    assert key == patched_key("host-wrong", [SourceEdit(EDIT.path, EDIT.old, EDIT.new)])
    assert key != patched_key("host-wrong", [SourceEdit(EDIT.path, EDIT.old, "i < n/2;")])
    assert key != patched_key("host-other", [EDIT])
    assert key != host_variant_key("host-release")


def test_cache_keys_change_with_the_default_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new default target rebuilds the cached variants: the targets are in the keys."""
    before = (host_variant_key("host-release"), cross_variant_key("arm64-release"),
              patched_key("host-wrong", [EDIT]))
    monkeypatch.setattr(cmake_build, "DEFAULT_TARGETS", ("llama-bench",))
    monkeypatch.setattr(patched, "DEFAULT_TARGETS", ("llama-bench",))
    after = (host_variant_key("host-release"), cross_variant_key("arm64-release"),
             patched_key("host-wrong", [EDIT]))
    assert all(b != a for b, a in zip(before, after, strict=True))
