"""No test module imports another: what two of them share lives in a helper module (properties/*_checks.py,
interpretations/*_checks.py, tests/fixtures), which tests import instead. Found from each test module's syntax tree,
imports inside functions included.

The four modules below still import property modules, to run a property function in-process and read its
PropertyViolation: its repro snippet, its figure, or the derive steps that rebuild its problem. They go when repro
snippets are built from the callable a property ran, not from code strings (the next step of the same work); the
list must shrink, never grow."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures.runs import ROOT

TEST_PACKAGES = ("properties", "interpretations", "tests")
STILL_RUNNING_PROPERTIES = {
    "tests/unit/test_bfloat16.py": {"properties.test_formula"},  # the drawn property's own search finds a defect
    "tests/unit/test_derivations.py": {
        "interpretations.test_bayesian", "interpretations.test_differential", "interpretations.test_geometric",
        "interpretations.test_probabilistic", "properties.test_dropout", "properties.test_formula",
        "properties.test_gradient_poisoning", "properties.test_gradients", "properties.test_heads",
        "properties.test_keyword_domain", "properties.test_masking", "properties.test_poisoning",
        "properties.test_probability", "properties.test_scaling", "properties.test_score_mods",
        "properties.test_sharded", "properties.test_stability", "properties.test_symmetry", "properties.test_tiling"},
    "tests/unit/test_failure_reading_figures.py": {"properties.test_formula", "properties.test_gradients",
                                                   "properties.test_poisoning"},
    "tests/unit/test_failure_reading_repro.py": {"properties.test_masking", "properties.test_regimes",
                                                 "properties.test_symmetry"},
}


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


def test_no_test_module_imports_another_beyond_the_listed_ones():
    found = {}
    for path in _test_modules():
        imported = imported_test_modules(path.read_text())
        if imported:
            found[path.relative_to(ROOT).as_posix()] = imported
    assert found == STILL_RUNNING_PROPERTIES, (
        "test modules importing test modules changed: move what they share into a helper module "
        f"(found {found})")


def test_every_way_of_importing_a_test_module_is_found():
    source = ("import properties.test_a\nfrom interpretations.test_b import x\nfrom tests.unit import test_c\n"
              "def f():\n    from properties import test_d, gradient_checks\n"
              "from properties.gradient_checks import check_gradients\nfrom tests.fixtures.runs import ROOT\n")
    assert imported_test_modules(source) == {"properties.test_a", "interpretations.test_b", "tests.unit.test_c",
                                             "properties.test_d"}
