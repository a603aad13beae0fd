"""No test module imports another: what two of them share lives in a helper module (properties/*_checks.py,
interpretations/*_checks.py, tests/fixtures), which tests import instead, a property's checks included (a unit test
calls the @reproducible check a property runs; a test of the drawn property itself runs it as the suite does, in
tests/suite_run). Found from each test module's syntax tree, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures.runs import ROOT

TEST_PACKAGES = ("properties", "interpretations", "tests")


def _is_test_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in TEST_PACKAGES and parts[-1].startswith("test_")


def imported_test_modules(source: str) -> set[str]:
    """The test modules `source` imports: `import a.test_b`, `from a.test_b import c` and `from a import test_b`,
    at any depth of the module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if _is_test_module(alias.name)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_test_module(node.module):
                found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if _is_test_module(f"{node.module}.{alias.name}")}
    return found


def _test_modules() -> list[Path]:
    return sorted(path for package in TEST_PACKAGES for path in (ROOT / package).rglob("test_*.py"))


def test_no_test_module_imports_another():
    found = {}
    for path in _test_modules():
        imported = imported_test_modules(path.read_text())
        if imported:
            found[path.relative_to(ROOT).as_posix()] = imported
    assert found == {}, f"test modules import test modules: move what they share into a helper module ({found})"


def test_every_way_of_importing_a_test_module_is_found():
    source = ("import properties.test_a\nfrom interpretations.test_b import x\nfrom tests.unit import test_c\n"
              "def f():\n    from properties import test_d, gradient_checks\n"
              "from properties.gradient_checks import check_gradients\nfrom tests.fixtures.runs import ROOT\n")
    assert imported_test_modules(source) == {"properties.test_a", "interpretations.test_b", "tests.unit.test_c",
                                             "properties.test_d"}
