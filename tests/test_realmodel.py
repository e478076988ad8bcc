"""The real model from PyPI: verified chunk by chunk, assembled atomically, labelled ladder.

The first tests use small stand-in chunks (the pinned sizes and digests swapped for theirs), so
every failure path runs in milliseconds and nothing of the real cache is touched; the last ones
use the installed package and the real ladder (made once per machine, about a minute).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts import realmodel
from harness.artifacts.gguf_info import read_model_info
from harness.cli import main
from harness.errors import ModelError


def _fake_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 parts: tuple[bytes, ...] = (b"GGUF-part-one|", b"part-two|", b"three")
                 ) -> list[Path]:
    folder = tmp_path / "site"
    folder.mkdir()
    files, chunks = [], []
    for i, data in enumerate(parts):
        path = folder / f"chunk{i}"
        path.write_bytes(data)
        files.append(path)
        chunks.append(realmodel.Chunk(f"mod{i}", path.name, len(data),
                                      hashlib.sha256(data).hexdigest()))
    whole = b"".join(parts)
    monkeypatch.setattr(realmodel, "CHUNKS", tuple(chunks))
    monkeypatch.setattr(realmodel, "SOURCE_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setattr(realmodel, "SOURCE_BYTES", len(whole))
    monkeypatch.setattr(realmodel, "chunk_files", lambda: list(files))
    return files


def test_sound_chunks_verify_and_assemble_to_the_published_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _fake_chunks(tmp_path, monkeypatch)
    realmodel.verify_chunks(files)
    dest = tmp_path / "cache" / "model.gguf"
    realmodel.assemble(dest, files)
    assert dest.read_bytes() == b"GGUF-part-one|part-two|three"


def test_a_truncated_chunk_is_named_with_its_size(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files = _fake_chunks(tmp_path, monkeypatch)
    files[1].write_bytes(b"part-")
    with pytest.raises(ModelError) as caught:
        realmodel.verify_chunks(files)
    message = str(caught.value)
    assert message.startswith(f"{files[1]}: 5 bytes, expected 9 (truncated or altered chunk)")
    assert "\n" not in message and "pip install" in message


def test_an_altered_chunk_of_the_right_size_is_named_by_its_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _fake_chunks(tmp_path, monkeypatch)
    files[2].write_bytes(b"THREE")
    with pytest.raises(ModelError, match=rf"^{files[2]}: sha256 [0-9a-f]{{16}}\.\.\. does not "
                                         r"match the pinned"):
        realmodel.verify_chunks(files)


def test_a_mismatching_assembly_leaves_nothing_in_the_cache(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    files = _fake_chunks(tmp_path, monkeypatch)
    monkeypatch.setattr(realmodel, "SOURCE_SHA256", "0" * 64)
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelError, match="is not the published"):
        realmodel.assemble(dest, files)
    assert list(dest.parent.iterdir()) == []  # no file, no temporary


def test_the_cli_refuses_a_bad_chunk_in_one_line_with_exit_2_and_keeps_the_cache_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _fake_chunks(tmp_path, monkeypatch)
    files[0].write_bytes(b"GGUF-part-ONE|")
    cache = tmp_path / "hcache"
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    result = CliRunner().invoke(main, ["models", "ladder", "--size", "gemma3-270m"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and str(files[0]) in errors[0] and "sha256" in errors[0]
    assert "Traceback" not in result.output
    leftovers = [p.name for p in cache.rglob("*") if p.is_file() and p.name != ".lock"]
    assert leftovers == []


def test_a_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realmodel, "CHUNKS", (realmodel.Chunk("no_such_chunk_pkg", "x", 1,
                                                               "0" * 64),))
    with pytest.raises(ModelError, match=r"no_such_chunk_pkg is not installed; install it with "
                                         r"pip install 'harness\[models\]'"):
        realmodel.chunk_files()


@pytest.mark.slow
def test_the_installed_chunks_match_the_pinned_digests() -> None:
    realmodel.verify_chunks(realmodel.chunk_files())


@pytest.mark.slow
def test_every_rung_of_the_real_ladder_records_its_source_and_chain(
        gemma_ladder: dict[str, Path]) -> None:
    from harness.artifacts.ladder import default_cache_root

    manifest = realmodel.read_manifest(default_cache_root())
    assert manifest is not None and manifest["source"]["sha256"] == realmodel.SOURCE_SHA256
    rungs = {r["quant"]: r for r in manifest["rungs"]}
    assert list(rungs) == list(gemma_ladder)
    f16 = rungs["F16"]
    assert f16["source_sha256"] == realmodel.SOURCE_SHA256 and f16["requantised"]
    assert "dequantised" in f16["chain"][-1]
    for quant, rung in rungs.items():
        info = read_model_info(gemma_ladder[quant])
        assert info.file_type_name == quant
        assert rung["bytes"] == gemma_ladder[quant].stat().st_size
        if quant != "F16":
            assert rung["source_sha256"] == f16["sha256"]
            assert rung["chain"][-1] == f"{quant}: requantised from the F16 by " \
                                        "llama_model_quantize"
    json.dumps(manifest)  # plain data


@pytest.mark.slow
def test_the_real_model_states_its_window_and_shape(gemma_ladder: dict[str, Path]) -> None:
    info = read_model_info(gemma_ladder["Q4_K_M"])
    assert (info.architecture, info.n_layer, info.n_head, info.n_head_kv) == ("gemma3", 18, 4, 1)
    assert (info.head_dim_k, info.head_dim_v, info.n_vocab) == (256, 256, 262_144)
    assert info.n_swa == 512 and info.n_swa_layers == 15 and info.tied_embeddings
