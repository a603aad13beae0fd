"""Rows of the expectations table that name what no longer exists, found before a run starts.

A row naming a property its claim no longer has (renamed, removed), a claim the catalogue lacks, or a
subject no built-in record is named would never be caught again, or would cover nothing: the run stops at
start with every such row listed (harness.pytest_plugin.plugin), instead of failing far away from the rename.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from protocol.known_defects import Row

PROPERTY_PACKAGES = ("properties", "interpretations")


def _claims_checked(decorator: ast.expr, constants: dict[str, str], where: str) -> tuple[str, ...]:
    """The slugs of a `@checks(...)` decorator (string literals or module-level string constants); () for
    any other decorator."""
    if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", getattr(decorator.func, "attr", None))
            == "checks"):
        return ()
    slugs = []
    for arg in decorator.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            slugs.append(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in constants:
            slugs.append(constants[arg.id])
        else:
            raise ValueError(f"{where}: @checks takes claim slugs as string literals or module-level string "
                             f"constants, got {ast.unparse(arg)}")
    return tuple(slugs)


def module_properties(source: str, where: str) -> dict[str, set[str]]:
    """claim -> the names of the property functions a module's `source` marks with @checks (harness.api.markers)."""
    tree = ast.parse(source, filename=where)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    found: dict[str, set[str]] = defaultdict(set)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                for slug in _claims_checked(decorator, constants, f"{where}:{node.lineno}"):
                    found[slug].add(node.name)
    return found


def suite_properties() -> dict[str, set[str]]:
    """Every claim's property function names, read from the source of every property module of the suite
    (nothing is imported, so a run registers its properties as it always did)."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in PROPERTY_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in spec.submodule_search_locations:
            for path in sorted(Path(folder).glob("test_*.py")):
                for slug, names in module_properties(path.read_text(encoding="utf-8"), str(path)).items():
                    found[slug] |= names
    return dict(found)


def record_names(targets: Iterable[str]) -> set[str] | None:
    """The names of the records at `targets` ('module.path:function'); None when one cannot be imported here
    (a missing backend): then which subjects exist cannot be told."""
    names = set()
    for target in targets:
        module, _, attr = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except ImportError:
            return None
        names.add(getattr(fn, "attention_name", target))
    return names


def stale_rows(rows: Iterable[Row], claims: Iterable[str], properties: Mapping[str, set[str]],
               subjects: set[str] | None) -> list[str]:
    """One line per row naming a claim not in `claims`, a property its claim does not have (`properties`:
    claim -> property names), or a subject not in `subjects` (None: not checked)."""
    known = set(claims)
    problems = []
    for row in rows:
        where = f"({row.subject}, {row.claim}, {', '.join(row.dtypes)})"
        if row.claim not in known:
            problems.append(f"{where}: the claim '{row.claim}' is not in the catalogue (specs/claims.toml)")
            continue
        missing = sorted(set(row.properties) - properties.get(row.claim, set()))
        if missing:
            problems.append(f"{where}: names properties {missing}, which '{row.claim}' no longer has; its "
                            f"properties: {sorted(properties.get(row.claim, ()))}")
        if subjects is not None and row.subject not in subjects:
            problems.append(f"{where}: no built-in record is named '{row.subject}' (impls/records.py)")
    return problems
