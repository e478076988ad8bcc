"""Rules of the code's shape that review would otherwise have to remember (issue 48, item 10):
byte units defined once, functions short enough to read, one name per class."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "harness"
UNIT_NAMES = re.compile(r"_?(K|M|G)(I?B|iB)", re.IGNORECASE)
MAX_FUNCTION_LINES = 80


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(PACKAGE.rglob("*.py"))]


def _power_of_two_literal(node: ast.expr) -> bool:
    """``1024 * 1024``, ``1 << 20`` and the like: a byte unit spelled out."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        sides = (node.left, node.right)
        return all(isinstance(s, ast.Constant) and s.value == 1024 for s in sides)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift):
        return isinstance(node.right, ast.Constant) and node.right.value in (10, 20, 30)
    return False


def test_byte_units_are_defined_in_harness_units_alone() -> None:
    found = []
    for path, tree in _modules():
        if path.name == "units.py" and path.parent == PACKAGE:
            continue
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            found += [f"{path.relative_to(PACKAGE)}:{node.lineno} defines {t.id}"
                      for t in targets if isinstance(t, ast.Name) and UNIT_NAMES.fullmatch(t.id)]
        found += [f"{path.relative_to(PACKAGE)}:{n.lineno} spells out a byte unit"
                  for n in ast.walk(tree) if isinstance(n, ast.BinOp)
                  and _power_of_two_literal(n)]
    assert not found, "use harness.units (KIB, MIB, GIB, MB):\n" + "\n".join(found)


def test_no_function_is_longer_than_eighty_lines() -> None:
    long = [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: "
            f"{node.end_lineno - node.lineno + 1} lines"
            for path, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"split these (at most {MAX_FUNCTION_LINES} lines):\n" + "\n".join(long)


# Class names two modules share today. A name on this list names two things a reader must tell
# apart by module; none may join it, and the knob registry's Knob and the accelerator's memory
# are no longer among them (labels.LabelPart, phonemem.PhoneMemory, offload.AcceleratorMemory).
SHARED_CLASS_NAMES = frozenset({
    "NewFailure", "Step", "EngineRow", "GateResult", "Recommendation", "Paging", "CpuCore",
    "GpuMemory", "Temperature", "BuildResult", "DeviceFacts", "Reference", "Refusal",
    "Capability", "Measurement", "Metric", "CooldownPolicy", "Summary", "Conditions", "Verdict",
    "Point"})


def test_a_class_name_names_one_class() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    new = {name: paths for name, paths in shared.items() if name not in SHARED_CLASS_NAMES}
    assert not new, f"classes of one name in several modules: {new}"
    assert {"Knob", "DeviceMemory"}.isdisjoint(shared)
