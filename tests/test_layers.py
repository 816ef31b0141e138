"""The import layers are true: every import in the package (at module level and inside functions, read
with `ast`) points down the layer table, and no two packages import each other, directly or round a
longer loop. The checker is tested on a planted tree too, so a broken checker cannot pass silently.

The layer of a module is its first component under `tuneplan` (a top-level module such as `api.py`
is its own package). A new package gets its place in LAYERS in the commit that adds it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS = {
    "errors": 0, "data": 0,
    "specs": 1,
    "physics": 2,
    "estimators": 3, "runs": 3, "configs": 3, "corpus": 3,
    "learn": 4, "profile": 4,
    "plan": 5, "report": 5,
    "integrations": 6, "api": 6,
    "commands": 7, "web": 7,
    "cli": 8,
    "__init__": 9, "__main__": 9,
}
"""Lower number = lower layer: a module imports its own layer or lower ones only."""


def _module_name(path: Path, src: Path) -> tuple[str, bool]:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join(parts), is_pkg


def _package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tuneplan":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path, src: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in a file, wherever it sits."""
    module, is_pkg = _module_name(path, src)
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            # `from tuneplan import api` names a package too (`__version__` is no package)
            if target == "tuneplan":
                out += [(node.lineno, f"tuneplan.{a.name}") for a in node.names if a.name in LAYERS]
    return out


def check(src: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """(upward imports as 'file:line: a imports b', package pairs on a cycle)."""
    root = src / "tuneplan"
    edges: dict[str, set[str]] = defaultdict(set)
    upward: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module, _ = _module_name(path, src)
        me = _package(module) or "__init__"
        for line, target in imports_of(path, src):
            other = _package(target)
            if other is None or other == me or other == "__init__":
                continue
            edges[me].add(other)
            if LAYERS.get(other, 99) > LAYERS.get(me, -1):
                upward.append(f"{path.relative_to(src)}:{line}: {me} imports {other}")
    cycles = set()

    def reaches(a: str, b: str) -> bool:
        seen, todo = {a}, [a]
        while todo:
            for n in edges.get(todo.pop(), ()):
                if n == b:
                    return True
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return False

    for a in list(edges):
        for b in edges[a]:
            if reaches(b, a):
                cycles.add(tuple(sorted((a, b))))
    return upward, sorted(cycles)


def test_every_package_has_a_layer():
    packages = {p.stem if p.is_file() else p.name for p in (SRC / "tuneplan").iterdir()
                if (p.is_file() and p.suffix == ".py") or (p / "__init__.py").exists()
                or (p.is_dir() and any(p.glob("*.py")))}
    assert packages <= set(LAYERS), f"give these a layer in LAYERS: {sorted(packages - set(LAYERS))}"


def test_imports_point_down_and_packages_form_no_cycle():
    upward, cycles = check(SRC)
    assert not upward, "imports up the layers:\n" + "\n".join(upward)
    assert not cycles, f"package cycles: {cycles}"


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / "tuneplan" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return tmp_path


CLEAN = {
    "__init__.py": "",
    "specs/__init__.py": "",
    "specs/job.py": "from tuneplan.errors import InputError\n",
    "errors.py": "",
    "physics/__init__.py": "",
    "physics/step.py": "from tuneplan.specs.job import InputError\nfrom ..specs import job\n",
}


def test_checker_passes_a_clean_tree(tmp_path):
    assert check(_plant(tmp_path, CLEAN)) == ([], [])


@pytest.mark.parametrize("planted", [
    "def f():\n    from tuneplan.estimators.kavier import K\n",  # inside a function
    "import tuneplan.learn.calibration\n",  # module level, plain import
    "from ..plan import search\n",  # relative
    "from tuneplan import api\n",  # a top-level module named through the package
])
def test_checker_fails_on_a_planted_upward_import(tmp_path, planted):
    src = _plant(tmp_path, {**CLEAN, "physics/terms.py": planted})
    upward, _ = check(src)
    assert len(upward) == 1 and upward[0].startswith("tuneplan/physics/terms.py:")


def test_checker_fails_on_a_planted_cycle(tmp_path):
    # runs and estimators share a layer: neither import is upward, the loop is still a cycle
    src = _plant(tmp_path, {**CLEAN, "runs/__init__.py": "from tuneplan.estimators import x\n",
                            "estimators/__init__.py": "def f():\n    import tuneplan.runs.io\n"})
    upward, cycles = check(src)
    assert upward == [] and cycles == [("estimators", "runs")]
