"""Build manifests: writing, importing, listing, validation and the `harness build(s)` CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.builds import (
    MANIFEST,
    Build,
    builds_root,
    copy_build,
    import_build,
    launch_env,
    list_builds,
    load_manifest,
    manifest_from_dict,
    open_build,
    parse_version_output,
    verify_build,
    write_build,
)
from harness.artifacts.cmake_build import (
    CROSS_VARIANTS,
    HOST_VARIANTS,
    cmake_defines,
    cpu_features,
    cross_variant_key,
    ensure_cross_build,
    ensure_host_build,
    host_variant_key,
)
from harness.artifacts.cpu_features import CpuFeatures
from harness.artifacts.llama_source import ensure_llama_source, read_source_info
from harness.cli import main
from harness.engines.llama_bench import parse_output
from harness.errors import BuildError, ConfigError


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def prebuilt(tmp_path: Path) -> Path:
    """A folder laid out like CI artefacts: bin/ with a tool, lib/ with a versioned library."""
    folder = tmp_path / "artefacts"
    _executable(folder / "bin" / "llama-bench", "#!/bin/sh\necho bench\n")
    (folder / "lib").mkdir()
    (folder / "lib" / "libllama.so.0.5.0").write_bytes(b"\x7fELF fake library")
    os.symlink("libllama.so.0.5.0", folder / "lib" / "libllama.so.0")
    return folder


def test_write_build_records_size_and_sha256_of_every_file(tmp_path: Path, prebuilt: Path) -> None:
    build = write_build(
        tmp_path / "builds", "b1", {"bin/llama-bench": prebuilt / "bin" / "llama-bench"},
        engine="llama.cpp", abi="x86_64", version="0.5.0", commit="abc1234",
        cmake_flags=["-DGGML_NATIVE=OFF"],
    )
    entry = build.manifest.file("bin/llama-bench")
    assert entry is not None
    assert entry.sha256 == _sha(build.path / "bin" / "llama-bench")
    assert entry.size == (build.path / "bin" / "llama-bench").stat().st_size
    assert load_manifest(build.path) == build.manifest
    assert build.manifest.cmake_flags == ("-DGGML_NATIVE=OFF",)
    assert not [p for p in (tmp_path / "builds").iterdir() if p.name.startswith(".")]


def test_existing_build_is_not_overwritten_without_replace(tmp_path: Path, prebuilt: Path) -> None:
    files = {"bin/llama-bench": prebuilt / "bin" / "llama-bench"}
    write_build(tmp_path, "b", files, engine="llama.cpp", abi="x86_64", version="1", commit="c")
    with pytest.raises(BuildError, match="build exists"):
        write_build(tmp_path, "b", files, engine="llama.cpp", abi="x86_64", version="1", commit="c")
    write_build(tmp_path, "b", files, engine="llama.cpp", abi="x86_64", version="2", commit="c",
                replace=True)
    assert open_build(tmp_path, "b").manifest.version == "2"


def test_import_dereferences_library_symlinks_into_plain_files(
    tmp_path: Path, prebuilt: Path
) -> None:
    build = import_build(prebuilt, tmp_path / "builds", "ci", abi="arm64-v8a")
    paths = [f.path for f in build.manifest.files]
    assert paths == ["bin/llama-bench", "lib/libllama.so.0", "lib/libllama.so.0.5.0"]
    linked = build.path / "lib" / "libllama.so.0"
    assert not linked.is_symlink()
    assert linked.read_bytes() == b"\x7fELF fake library"
    assert build.manifest.abi == "arm64-v8a"
    assert verify_build(build) == []


def test_import_of_a_flat_folder_sorts_executables_and_libraries(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    _executable(flat / "llama-cli", "#!/bin/sh\n")
    (flat / "libggml.so").write_bytes(b"lib")
    (flat / "README.txt").write_text("not a binary")
    build = import_build(flat, tmp_path / "builds", "flat", abi="arm64-v8a")
    assert [f.path for f in build.manifest.files] == ["bin/llama-cli", "lib/libggml.so"]


def test_import_without_executables_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match="no executables"):
        import_build(tmp_path / "empty", tmp_path / "builds", "x", abi="x86_64")


def test_verify_reports_a_file_changed_after_the_build(tmp_path: Path, prebuilt: Path) -> None:
    build = import_build(prebuilt, tmp_path / "builds", "ci", abi="arm64-v8a")
    (build.path / "bin" / "llama-bench").write_text("tampered")
    assert verify_build(build) == ["bin/llama-bench: content differs from the manifest"]


def _manifest(tmp_path: Path, prebuilt: Path) -> tuple[Path, dict[str, object]]:
    build = import_build(prebuilt, tmp_path / "builds", "ci", abi="arm64-v8a")
    return build.path, json.loads((build.path / MANIFEST).read_text())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("abi"), "key 'abi' is missing"),
        (lambda d: d.update(files=[{"path": "../escape", "size": 1, "sha256": "0" * 64}]),
         r"key 'files\[0\].path' \('../escape'\) must be a relative path inside"),
        (lambda d: d.update(files=[{"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}]),
         "must be a relative path inside"),
        (lambda d: d.update(files=[{"path": "bin/x", "size": -1, "sha256": "0" * 64}]),
         r"files\[0\].size"),
        (lambda d: d.update(files=[{"path": "bin/x", "size": 1, "sha256": "xyz"}]),
         r"files\[0\].sha256"),
        (lambda d: d.update(format=99), "key 'format' is 99"),
        (lambda d: d.update(cmake_flags="-DX=1"), "key 'cmake_flags'"),
    ],
)
def test_invalid_manifest_names_file_and_key(
    tmp_path: Path, prebuilt: Path, mutate: object, message: str
) -> None:
    folder, data = _manifest(tmp_path, prebuilt)
    mutate(data)  # type: ignore[operator]
    (folder / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as error:
        load_manifest(folder)
    assert str(folder / MANIFEST) in str(error.value)


def test_manifest_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_manifest(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 0.5.0-dev (build 0, commit 0c1e570)\nbuilt with GNU", ("0.5.0-dev", "0c1e570")),
        ("version: 4589 (3e4b7a6d)\nbuilt with cc", ("4589", "3e4b7a6d")),
        ("version: 0.5.0-dev (build 0, commit unknown)", ("0.5.0-dev", None)),
        ("no version here", (None, None)),
    ],
)
def test_version_output_of_old_and_new_llama_cpp(
    text: str, expected: tuple[str | None, str | None]
) -> None:
    assert parse_version_output(text) == expected


def test_builds_root_prefers_option_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_BUILDS", "/from/env")
    assert builds_root("/explicit") == Path("/explicit")
    assert builds_root(None) == Path("/from/env")
    monkeypatch.delenv("HARNESS_BUILDS")
    assert builds_root(None) == Path("builds")


def test_copy_build_renames_and_reuses_an_identical_copy(tmp_path: Path, prebuilt: Path) -> None:
    cached = import_build(prebuilt, tmp_path / "cache", "host-release-abcd", abi="x86_64")
    first = copy_build(cached, tmp_path / "builds", "host-release")
    assert first.name == "host-release"
    assert first.manifest.files == cached.manifest.files
    mtime = (first.path / MANIFEST).stat().st_mtime_ns
    again = copy_build(cached, tmp_path / "builds", "host-release")
    assert (again.path / MANIFEST).stat().st_mtime_ns == mtime  # reused, not rewritten


def test_cli_import_then_list_as_json(tmp_path: Path, prebuilt: Path) -> None:
    runner = CliRunner()
    root = tmp_path / "builds"
    result = runner.invoke(main, ["build", "import", str(prebuilt), "--name", "ci",
                                  "--abi", "arm64-v8a", "--builds", str(root)])
    assert result.exit_code == 0, result.output
    assert "ci: llama.cpp" in result.output
    listed = runner.invoke(main, ["builds", "--json", "--builds", str(root)])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["name"], r["abi"], r["files"]) for r in rows] == [("ci", "arm64-v8a", 3)]
    assert list_builds(root)[0].path == root / "ci"


ARM_CPU = CpuFeatures(
    "aarch64", ("-march=armv8.2-a+dotprod+fp16",),
    (("dotprod", True), ("fp16", True), ("i8mm", False), ("sve", False), ("sme", False)),
)


def test_manifest_records_cpu_features_and_reads_them_back(
    tmp_path: Path, prebuilt: Path
) -> None:
    build = write_build(tmp_path, "arm", {"bin/llama-bench": prebuilt / "bin" / "llama-bench"},
                        engine="llama.cpp", abi="arm64-v8a", version="0.5.0", commit="c",
                        cpu=ARM_CPU)
    data = json.loads((build.path / MANIFEST).read_text())
    assert data["format"] == 3
    assert data["backends"] == [] and data["env"] == {}  # a CPU build needs nothing more
    assert data["cpu"] == {
        "arch": "aarch64", "arch_flags": ["-march=armv8.2-a+dotprod+fp16"],
        "features": {"dotprod": True, "fp16": True, "i8mm": False, "sve": False, "sme": False},
        "kleidiai": False,
    }
    loaded = load_manifest(build.path)
    assert loaded == build.manifest and loaded.cpu == ARM_CPU
    assert loaded.cpu is not None and loaded.cpu.has("dotprod") and not loaded.cpu.has("i8mm")
    copied = copy_build(build, tmp_path / "other", "arm2")
    assert copied.manifest.cpu == ARM_CPU


def test_format_1_manifest_without_cpu_still_loads(tmp_path: Path, prebuilt: Path) -> None:
    folder, data = _manifest(tmp_path, prebuilt)
    data.pop("cpu")
    data["format"] = 1
    (folder / MANIFEST).write_text(json.dumps(data))
    manifest = load_manifest(folder)
    assert manifest.cpu is None and manifest.format == 1
    data.pop("format")  # the earliest manifests had no format key at all
    (folder / MANIFEST).write_text(json.dumps(data))
    assert load_manifest(folder).cpu is None


@pytest.mark.parametrize(
    ("cpu", "message"),
    [
        ("aarch64", "key 'cpu': must be an object"),
        ({"arch_flags": []}, "key 'cpu': key 'arch' must be a string"),
        ({"arch": "aarch64", "features": {"dotprod": "yes"}}, "key 'features'"),
        ({"arch": "aarch64", "arch_flags": "-march=x"}, "key 'arch_flags'"),
        ({"arch": "aarch64", "kleidiai": 1}, "key 'kleidiai'"),
    ],
)
def test_invalid_cpu_features_name_the_key(
    tmp_path: Path, prebuilt: Path, cpu: object, message: str
) -> None:
    folder, data = _manifest(tmp_path, prebuilt)
    data["cpu"] = cpu
    (folder / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message):
        load_manifest(folder)


def test_cli_builds_shows_cpu_features(
    tmp_path: Path, prebuilt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich folds cells to the terminal's width
    root = tmp_path / "builds"
    write_build(root, "arm", {"bin/llama-bench": prebuilt / "bin" / "llama-bench"},
                engine="llama.cpp", abi="arm64-v8a", version="1", commit="c", cpu=ARM_CPU)
    import_build(prebuilt, root, "ci", abi="arm64-v8a")  # an import: features unknown
    runner = CliRunner()
    rows = json.loads(runner.invoke(main, ["builds", "--json", "--builds", str(root)]).output)
    assert [(r["name"], r["cpu"]) for r in rows] == [("arm", ARM_CPU.to_dict()), ("ci", None)]
    table = runner.invoke(main, ["builds", "--builds", str(root)])
    assert table.exit_code == 0, table.output
    assert "cpu" in table.output and "aarch64 dotprod fp16" in table.output


def _fake_cached_build(cache: Path, name: str, prebuilt: Path, flags: list[str]) -> None:
    """A cached build as older harness versions wrote it: format 1, no cpu."""
    files = {"bin/llama-bench": prebuilt / "bin" / "llama-bench"}
    build = write_build(cache / "builds", name, files, engine="llama.cpp", abi="x86_64",
                        version="1", commit="c", cmake_flags=flags)
    data = json.loads((build.path / MANIFEST).read_text())
    data.pop("cpu")
    data["format"] = 1
    (build.path / MANIFEST).write_text(json.dumps(data))


def test_cached_builds_from_before_cpu_features_get_them_on_use(
    tmp_path: Path, prebuilt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ensure_*_build finds a cached build made before manifests had "cpu": it fills them in
    from the recorded cmake flags instead of recompiling."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    cache, root = tmp_path / "cache", tmp_path / "builds"
    slow = cmake_defines("host", extra=HOST_VARIANTS["host-slow"])
    _fake_cached_build(cache, f"host-slow-{host_variant_key('host-slow')}", prebuilt,
                       [f"-D{k}={v}" for k, v in slow.items()])
    toolchain = cache / "toolchains" / "aarch64-linux-gnu.toolchain.cmake"
    arm = cmake_defines("arm64-v8a", None, CROSS_VARIANTS["arm64-release"], toolchain=toolchain)
    _fake_cached_build(cache, f"arm64-release-{cross_variant_key('arm64-release')}", prebuilt,
                       [f"-D{k}={v}" for k, v in arm.items()])
    host = ensure_host_build("host-slow", root, cache=cache)
    assert host.manifest.cpu == cpu_features("host", slow)
    assert ensure_cross_build("arm64-release", root, cache=cache).manifest.cpu == ARM_CPU
    cached = list_builds(cache / "builds")
    assert all(b.manifest.cpu is not None and b.manifest.format == 3 for b in cached)
    assert not (cache / "cmake").exists()  # nothing was compiled


def test_cli_verify_exits_nonzero_on_a_tampered_build(tmp_path: Path, prebuilt: Path) -> None:
    build = import_build(prebuilt, tmp_path, "ci", abi="arm64-v8a")
    (build.path / "lib" / "libllama.so.0").write_bytes(b"other")
    result = CliRunner().invoke(main, ["builds", "--verify", "--json", "--builds", str(tmp_path)])
    assert result.exit_code == 1
    assert "lib/libllama.so.0: content differs" in result.output


def test_cli_unknown_define_syntax_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["build", "llama.cpp", "--source", str(tmp_path),
                                       "--name", "x", "-D", "NOEQUALS", "--builds", str(tmp_path)])
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.output
    assert "Traceback" not in result.output


def test_cli_arm64_build_without_ndk_or_cross_compiler_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --ndk, no $ANDROID_NDK: the cross compiler is used; without it, one line naming the
    package (PATH keeps cmake and git, so nothing but the compiler is missing)."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for tool in ("cmake", "git", "nice"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    result = CliRunner().invoke(main, ["build", "llama.cpp", "--source", str(tmp_path),
                                       "--name", "phone", "--abi", "arm64-v8a",
                                       "--builds", str(tmp_path / "builds")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "aarch64-linux-gnu-gcc not on PATH" in lines[0]
    assert "install g++-aarch64-linux-gnu" in lines[0] and "--ndk" in lines[0]
    assert not (tmp_path / "cache" / "cmake").exists()


@pytest.mark.slow
def test_cli_builds_the_vendored_llama_cpp_for_the_host(
    tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    """The command of the issue's "done when": a build whose llama-bench runs, sha256s match."""
    source = ensure_llama_source()
    root = tmp_path / "builds"
    result = CliRunner().invoke(main, ["build", "llama.cpp", "--source", str(source),
                                       "--name", "host-release", "--builds", str(root), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["name"], summary["abi"], summary["engine"]) == (
        "host-release", os.uname().machine, "llama.cpp")
    build = open_build(root, "host-release")
    assert build.manifest.commit == read_source_info(source).commit  # type: ignore[union-attr]
    assert "-DGGML_NATIVE=OFF" in build.manifest.cmake_flags
    for entry in build.manifest.files:
        assert _sha(build.path / entry.path) == entry.sha256
    run = subprocess.run(
        [str(build.binary()), "-m", str(tiny_ladder["Q4_K_M"]), "-p", "32", "-n", "16", "-r", "2",
         "-o", "jsonl"], capture_output=True, text=True, timeout=300, check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert [(r.n_prompt, r.n_gen) for r in parse_output(run.stdout)] == [(32, 0), (0, 16)]


def test_manifest_records_backends_and_launch_environment(tmp_path: Path, prebuilt: Path) -> None:
    """A GPU/NPU build says which backends it has and what its launch needs ({lib}: its
    lib/ folder on the device), and reads them back; a bad env is refused naming the key."""
    build = write_build(tmp_path, "npu", {"bin/llama-bench": prebuilt / "bin" / "llama-bench"},
                        engine="llama.cpp", abi="arm64-v8a", backends=("opencl", "hexagon"),
                        env={"ADSP_LIBRARY_PATH": "{lib}"})
    again = list_builds(tmp_path)[0].manifest
    assert again.backends == ("opencl", "hexagon")
    assert launch_env(again, "/data/local/tmp/b/lib") == {
        "ADSP_LIBRARY_PATH": "/data/local/tmp/b/lib"}
    data = json.loads((build.path / MANIFEST).read_text())
    data["env"] = {"BAD NAME": "x"}
    with pytest.raises(ConfigError, match="key 'env'"):
        manifest_from_dict(data, build.path / MANIFEST)
