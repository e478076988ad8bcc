"""``harness build`` and ``harness builds``: make, import and list engine builds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.artifacts.builds import Build, builds_root, import_build, list_builds, verify_build
from harness.artifacts.cmake_build import (
    ABIS,
    BACKENDS,
    DEFAULT_TARGETS,
    abi_name,
    build_llama_cpp,
    parse_defines,
)
from harness.artifacts.release_import import import_release
from harness.errors import BuildError

BUILDS_OPTION = click.option(
    "--builds", "builds_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Builds root (default: $HARNESS_BUILDS or ./builds).",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _summary(build: Build) -> dict[str, Any]:
    m = build.manifest
    return {
        "name": m.name, "path": str(build.path), "engine": m.engine, "version": m.version,
        "commit": m.commit, "abi": m.abi, "files": len(m.files),
        "bytes": sum(f.size for f in m.files), "created_at": m.created_at,
        "cpu": m.cpu.to_dict() if m.cpu else None,
        "backends": list(m.backends), "env": dict(m.env),
    }


def _cpu(build: Build) -> str:
    cpu = build.manifest.cpu
    return cpu.summary() if cpu else "?"


def _report(build: Build, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_summary(build), indent=2))
    else:
        m = build.manifest
        click.echo(f"{m.name}: {m.engine} {m.version or '?'} ({(m.commit or '?')[:12]}) "
                   f"{m.abi} [{_cpu(build)}], {len(m.files)} files in {build.path}")


@click.group("build")
def build() -> None:
    """Make engine builds: compile llama.cpp, or wrap prebuilt binaries.

    A build is builds/<name>/ with bin/, lib/ and manifest.json (engine, version, commit, ABI,
    cmake flags, CPU features, every file's size and sha256).

    \b
    Example:
      harness build llama.cpp --source ~/src/llama.cpp --name master-host
      harness build import ./ci-artifacts --name nightly --abi arm64-v8a
      harness build import llama-b10375-bin-android-arm64.tar.gz
    """


@build.command("llama.cpp")
@click.option("--source", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="A llama.cpp source tree (a git checkout or the vendored copy).")
@click.option("--name", required=True, help="Build name: the folder under the builds root.")
@click.option("--abi", type=click.Choice(ABIS), default="host", show_default=True,
              help="Target: this host, or arm64-v8a (with --ndk: Android's NDK; without: Debian's "
                   "aarch64 cross compiler, a static binary).")
@click.option("--ndk", type=click.Path(file_okay=False, path_type=Path), envvar="ANDROID_NDK",
              help="Android NDK root for arm64-v8a (default: $ANDROID_NDK; with neither, "
                   "Debian's aarch64 cross compiler is used).")
@click.option("--backend", type=click.Choice(BACKENDS), default="cpu", show_default=True,
              help="A GPU/NPU backend beside the CPU's: vulkan (glslc + Vulkan headers; for a "
                   "phone the NDK), opencl (Adreno; the NDK with OpenCL headers and ICD loader), "
                   "hexagon (Snapdragon NPU; NDK + Hexagon SDK). See docs/gpu.md.")
@click.option("--hexagon-sdk", type=click.Path(file_okay=False, path_type=Path),
              envvar="HEXAGON_SDK_ROOT", help="Hexagon SDK root (default: $HEXAGON_SDK_ROOT).")
@click.option("--hexagon-tools", type=click.Path(file_okay=False, path_type=Path),
              envvar="HEXAGON_TOOLS_ROOT",
              help="Hexagon tools root (default: $HEXAGON_TOOLS_ROOT).")
@click.option("-D", "defines", multiple=True, metavar="KEY=VAL",
              help="Extra cmake definition, e.g. -D GGML_AVX2=OFF (repeatable).")
@click.option("--target", "targets", multiple=True, metavar="TOOL",
              help=f"cmake target to build and keep (repeatable; default "
                   f"{', '.join(DEFAULT_TARGETS)}).")
@click.option("--jobs", type=int, default=None, help="Parallel compile jobs (default: all CPUs).")
@click.option("--replace", is_flag=True, help="Overwrite an existing build of that name.")
@BUILDS_OPTION
@JSON_OPTION
def build_llama(
    source: Path, name: str, abi: str, ndk: Path | None, backend: str,
    hexagon_sdk: Path | None, hexagon_tools: Path | None, defines: tuple[str, ...],
    targets: tuple[str, ...], jobs: int | None, replace: bool, builds_dir: Path | None,
    as_json: bool,
) -> None:
    """Configure and compile llama.cpp with cmake, then store the products as a build.

    Builds always use -DGGML_NATIVE=OFF (native builds use AMX here and crash). arm64-v8a with
    --ndk uses the NDK's toolchain file with the options of llama.cpp's docs/android.md; without
    an NDK it uses Debian's aarch64-linux-gnu cross compiler (package g++-aarch64-linux-gnu) and
    links one static llama-bench, runnable under qemu-aarch64. The cmake tree is kept in
    $HARNESS_CACHE/trees, so rebuilding with other flags is incremental, and every compile goes
    through ccache where installed (a file compiled with the same flags in any tree is
    reused). The manifest records the CPU features the build was compiled for (arch flags,
    AVX2/dotprod/..., KleidiAI), the backends compiled in and the environment a launch needs
    (--backend hexagon: ADSP_LIBRARY_PATH). What a backend needs and this machine lacks is
    named before anything is compiled.

    \b
    Example:
      harness build llama.cpp --source ~/.cache/harness/src/llama.cpp-0.3.36 --name host-release
      harness build llama.cpp --source ../llama.cpp --name slow -D GGML_AVX2=OFF
      harness build llama.cpp --source ../llama.cpp --name phone --abi arm64-v8a --ndk $NDK
      harness build llama.cpp --source ../llama.cpp --name arm64 --abi arm64-v8a   # no NDK
      harness build llama.cpp --source ../llama.cpp --name host-vulkan --backend vulkan
      harness build llama.cpp --source ../llama.cpp --name adreno --abi arm64-v8a \
          --ndk $NDK --backend opencl
    """
    extra = parse_defines(defines)
    root = builds_root(builds_dir)
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]compiling[/bold]"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), TextColumn("{task.description}"), console=console, transient=True,
    ) as progress:
        task = progress.add_task("configuring", total=1.0)

        def advance(fraction: float, line: str) -> None:
            progress.update(task, completed=fraction, description=line[-60:])

        made = build_llama_cpp(
            source, root, name, abi=abi, ndk=ndk, extra=extra,
            targets=targets or DEFAULT_TARGETS, jobs=jobs, progress=advance, replace=replace,
            backend=backend, hexagon_sdk=hexagon_sdk, hexagon_tools=hexagon_tools,
        )
    _report(made, as_json)


@build.command("import")
@click.argument("source", metavar="ARCHIVE_OR_FOLDER",
                type=click.Path(exists=True, path_type=Path))
@click.option("--name", default=None,
              help="Build name: the folder under the builds root (default for a release "
                   "archive: llama-<tag>-<platform>; required for a folder).")
@click.option("--abi", default="host", show_default=True,
              help="ABI of a folder's binaries: host (this machine) or e.g. arm64-v8a (an "
                   "archive's is read from its llama-bench).")
@click.option("--engine", default="llama.cpp", show_default=True, help="Engine name.")
@click.option("--replace", is_flag=True, help="Overwrite an existing build of that name.")
@BUILDS_OPTION
@JSON_OPTION
def build_import(
    source: Path, name: str | None, abi: str, engine: str, replace: bool,
    builds_dir: Path | None, as_json: bool,
) -> None:
    """Make a build from an official llama.cpp release archive, or wrap a folder of prebuilt
    binaries (e.g. your CI's artefacts).

    An archive is taken as llama.cpp publishes it (llama-<tag>-bin-<platform>.tar.gz or .zip,
    one llama-<tag>/ folder inside): the tag is recorded as the version, the ABI is read from
    llama-bench's ELF header, and the device backends (opencl, hexagon, vulkan) from the backend
    libraries it holds; a build with a backend is asked for its --list-devices on a phone the
    first time a run uses it.

    A FOLDER holds bin/ and lib/, or the files flat (executables go to bin/, *.so to lib/).
    Host binaries named llama-bench are asked for their --version to fill in version and commit.

    \b
    Example:
      harness build import llama-b10375-bin-android-arm64.tar.gz
      harness build import ./artifacts/android-arm64 --name nightly-2026-11-29 --abi arm64-v8a
    """
    root = builds_root(builds_dir)
    if source.is_file():
        made = import_release(source, root, name, replace=replace)
    elif name is None:
        raise BuildError(f"{source}: a folder import needs a build name: add --name NAME")
    else:
        abi = abi_name(abi) if abi in ABIS else abi
        made = import_build(source, root, name, abi=abi, engine=engine, replace=replace)
    _report(made, as_json)


@click.command("builds")
@click.option("--verify", is_flag=True, help="Re-hash every file and report differences.")
@BUILDS_OPTION
@JSON_OPTION
def builds(verify: bool, builds_dir: Path | None, as_json: bool) -> None:
    """List the engine builds under the builds root.

    \b
    Example:
      harness builds
      harness builds --json | jq -r '.[].name'
    """
    found = list_builds(builds_root(builds_dir))
    problems = {b.name: verify_build(b) for b in found} if verify else {}
    if as_json:
        rows = [{**_summary(b), **({"problems": problems[b.name]} if verify else {})}
                for b in found]
        click.echo(json.dumps(rows, indent=2))
    else:
        table = Table(title=f"builds in {builds_root(builds_dir)}")
        for column in ("name", "engine", "version", "commit", "abi", "cpu", "files", "path"):
            table.add_column(column, overflow="fold")
        if verify:
            table.add_column("verify")
        for b in found:
            m = b.manifest
            row = [m.name, m.engine, m.version or "?", (m.commit or "?")[:12], m.abi, _cpu(b),
                   str(len(m.files)), str(b.path)]
            if verify:
                row.append("; ".join(problems[b.name]) or "ok")
            table.add_row(*row)
        Console().print(table)
    if any(problems.values()):
        raise SystemExit(1)


COMMANDS: list[click.Command] = [build, builds]
