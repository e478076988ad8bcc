"""JUnit XML for CI systems: one testcase per device x config x metric, a failure per failed gate.

Why JUnit: Jenkins, GitLab, GitHub Actions (through a reporter action) and Buildkite all render
it without plugins, so a nightly job shows *which* cell regressed, not only a red exit code.
The layout follows the de facto schema (testsuites > testsuite > testcase > failure /
system-out) that those tools read.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from harness.analysis.ab import BuildComparison
from harness.errors import StoreError


def junit_document(result: BuildComparison, suite: str = "harness.compare") -> ET.Element:
    """The XML tree of one comparison (pure: no file I/O)."""
    cases: list[ET.Element] = []
    failures = 0
    for cell in result.cells:
        c = cell.comparison
        case = ET.Element("testcase", {
            "classname": f"{suite}.{cell.key.device}",
            "name": f"{cell.metric} {cell.label} [{cell.key.config_id}]",
            "time": "0",
        })
        failed = result.failed_gates(cell.key, cell.metric)
        if failed:
            failures += 1
            failure = ET.SubElement(case, "failure", {
                "message": "; ".join(g.message for g in failed),
                "type": "gate",
            })
            failure.text = f"verdict {c.verdict}: {c.reason}"
        out = ET.SubElement(case, "system-out")
        out.text = (f"{result.baseline_side} -> {result.candidate_side}: verdict {c.verdict}; "
                    f"{c.reason}")
        cases.append(case)
    root = ET.Element("testsuites", {"tests": str(len(cases)), "failures": str(failures)})
    suite_el = ET.SubElement(root, "testsuite", {
        "name": f"{suite} {result.baseline_side} vs {result.candidate_side}",
        "tests": str(len(cases)),
        "failures": str(failures),
        "errors": "0",
        "skipped": "0",
    })
    suite_el.extend(cases)
    return root


def write_junit(result: BuildComparison, path: Path, suite: str = "harness.compare") -> Path:
    """Write the document atomically (a CI reader never sees half a file)."""
    tree = ET.ElementTree(junit_document(result, suite))
    ET.indent(tree)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tree.write(tmp, encoding="utf-8", xml_declaration=True)
        tmp.replace(path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write JUnit file {path}: {error.strerror or error}") from error
    return path
