"""The house's layout rules that no import contract states: module names are unique across the packages outside
tests/ (a name says which module it is), and every package has its docstring saying what it holds."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.fixtures.runs import ROOT

PACKAGES = ("specs", "protocol", "impls", "harness", "properties", "interpretations", "zoo", "tools")
SHARED = {"__init__.py", "conftest.py"}


def _modules() -> list:
    return [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
            if "__pycache__" not in path.parts and path.name not in SHARED]


def test_module_names_are_unique_across_packages():
    where = defaultdict(list)
    for path in _modules():
        where[path.name].append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"modules sharing a name: {clashes}"


def test_every_package_says_what_it_holds():
    silent = [str(init.relative_to(ROOT)) for package in PACKAGES for init in (ROOT / package).rglob("__init__.py")
              if "__pycache__" not in init.parts and not ast.get_docstring(ast.parse(init.read_text()))]
    assert not silent, f"packages without a docstring: {silent}"
