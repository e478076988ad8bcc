"""Hostile strings (tests/data/hostile/strings.json) never run as code and never leave their roots.

Every string is tried where it could reach a shell or a page: as matrix build and model names
(rejected), as engine arguments run through the device shell (arrive as literal words), as model
file names and phone properties in a real run (treated as names), and as names in the HTML report
(escaped). ``@MARKER@`` in a string is a file that appears only if some shell ran the string.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build, BuildError, check_name
from harness.cli import main
from harness.device import get_device
from harness.errors import ConfigError
from harness.matrix import parse_matrix
from harness.run.deploy import DEVICE_ROOT, model_remote_path
from harness.run.runner import RunOptions, execute
from harness.run.trial import launch_command
from harness.testing.synthstore import SynthSpec, write_synthetic_store

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "hostile" /
                     "strings.json").read_text())["strings"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


def hostile(marker: Path) -> list[str]:
    return [s.replace("@MARKER@", str(marker)) for s in CORPUS]


def matrix_doc(**axes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"build": ["host-release"], "model": ["tiny"], "quant": ["Q8_0"],
                            "n_ctx": [512]}
    base.update(axes)
    return {"name": "hostile", "axes": base, "models": {"tiny": {"ladder": "tiny"}},
            "workload": {"n_prompt": 8, "n_gen": 8}}


def test_hostile_strings_are_rejected_as_build_and_model_names(marker: Path) -> None:
    for text in hostile(marker):
        for axis in ("build", "model"):
            with pytest.raises(ConfigError) as error:
                parse_matrix(matrix_doc(**{axis: [text]}), "m.yaml")
            assert "\n" not in str(error.value) and "is not a valid" in str(error.value)
        with pytest.raises(BuildError):
            check_name(text)
    assert not marker.exists()


def test_hostile_engine_arguments_reach_the_device_as_literal_words(
    virtual_phone: Any, marker: Path
) -> None:
    device = get_device(virtual_phone.serial)
    words = [s for s in hostile(marker) if "\0" not in s]
    for word in words:
        line = launch_command(f"{DEVICE_ROOT}/trials/hostile", ["printf", "%s|", word], None)
        result = device.shell(line, timeout=30)
        assert result.exit_code == 0, (word, result.stderr)
        assert result.stdout == f"{word}|", word
    assert not marker.exists()
    assert not list(virtual_phone.root.rglob("PWNED"))


def test_device_paths_stay_under_the_harness_root() -> None:
    for name in ("../../etc/passwd", "/etc/passwd", "a/../../b.gguf"):
        remote = model_remote_path("0" * 64, name)
        assert remote.startswith(f"{DEVICE_ROOT}/models/{'0' * 64}/")
        assert ".." not in remote.split("/")


def test_a_build_file_symlinked_out_of_its_folder_is_refused(
    tmp_path: Path, host_build: Build
) -> None:
    root = tmp_path / "builds"
    shutil.copytree(host_build.path, root / "evil")
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the phone")
    binary = root / "evil" / "bin" / "llama-bench"
    binary.unlink()
    binary.symlink_to(outside)
    result = CliRunner().invoke(main, ["builds", "--builds", str(root)])
    assert result.exit_code == 2, result.output
    assert "resolves outside the build folder" in result.output
    assert "Traceback" not in result.output


def _escaped_everywhere(html: str, texts: list[str]) -> None:
    """A string that could open a tag (``<``, ``>``) never appears raw; quotes are harmless in
    text and jinja2/matplotlib escape them in attributes, which the img payload checks."""
    for text in texts:
        if any(c in text for c in "<>"):
            assert text not in html, f"unescaped in the report: {text!r}"
    assert "<script>alert" not in html and "<img src=x" not in html


def test_hostile_names_in_the_report_are_escaped(tmp_path: Path, marker: Path) -> None:
    names = (*[s for s in hostile(marker) if "\0" not in s][:12],
             "<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>")
    root = tmp_path / "store"
    write_synthetic_store(root, SynthSpec(devices=len(names), device_names=names, nights=2,
                                          reps=1, quants=("Q4_0",), n_ctx=(512,),
                                          kv_types=("f16",)))
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "--results", str(root), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    _escaped_everywhere(html, list(names))
    assert not marker.exists()


@pytest.mark.slow
def test_hostile_model_files_and_phone_properties_in_a_real_run(
    virtual_phones: Any, tmp_path: Path, marker: Path, host_build: Build,
    tiny_ladder: dict[str, Path],
) -> None:
    texts = [s for s in hostile(marker) if "\0" not in s and "/" not in s and s != ".."]
    profile = yaml.safe_load((REPO / "devices" / "midrange-8gb.yaml").read_text())
    profile["name"] = "hostile-phone"
    profile["props"]["ro.product.model"] = "<script>alert(1)</script>"
    profile["props"]["ro.product.manufacturer"] = f"$(touch {marker})"
    profile["props"]["ro.soc.model"] = f"`touch {marker}`; \"><img src=x onerror=alert(1)>"
    profile_path = tmp_path / "hostile-phone.yaml"
    profile_path.write_text(yaml.safe_dump(profile, allow_unicode=True))
    (phone,) = virtual_phones(1, profile=str(profile_path))

    models_dir = tmp_path / "models"
    models_dir.mkdir()
    pairs = [texts[i:i + 3] for i in range(0, len(texts), 3)]  # three strings per file name
    models = {}
    for index, group in enumerate(pairs):
        name = "".join(group)[:200] + ".gguf"
        shutil.copy(tiny_ladder["Q8_0"], models_dir / name)
        template = str(models_dir / name).replace("{", "{{").replace("}", "}}")
        models[f"m{index}"] = {"path": template}
    doc = matrix_doc(model=list(models), n_ctx=[256])
    doc["models"] = models
    doc["repetitions"] = 1
    doc["cooldown"] = {"max_thermal_status": 6, "max_temperature_c": 150,
                       "min_battery_pct": 0, "max_wait_s": 1}
    matrix = tmp_path / "hostile.yaml"
    matrix.write_text(yaml.safe_dump(doc, allow_unicode=True))

    results = tmp_path / "results"
    summary = execute(matrix, [get_device(phone.serial)],
                      RunOptions(results=results, builds=host_build.path.parent))
    assert dict(summary.outcomes()) == {"ok": len(models)}  # each file ran as the named model
    trials = store.read_table(results, "trials")
    assert set(trials["device_model"]) == {"<script>alert(1)</script>"}  # a name, kept as is
    on_phone = {p.name for p in (phone.root / "data/local/tmp/harness/models").rglob("*.gguf")}
    assert on_phone == {n for n in (p.name for p in models_dir.iterdir())}
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "--results", str(results), "-o", str(out)])
    assert result.exit_code == 0, result.output
    _escaped_everywhere(out.read_text(), [*texts, *profile["props"].values()])
    assert not marker.exists()
    assert not list(phone.root.rglob("PWNED"))
