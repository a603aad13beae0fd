"""Rows of the expectations table that name what no longer exists, found before a run starts.

A row naming a property its claim no longer has (renamed, removed), a claim the catalogue lacks, or a
subject no built-in record is named would never be caught again, or would cover nothing: the run stops at
start with every such row listed (harness.plugin), instead of failing far away from the rename.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping

from harness.markers import PROPERTIES
from impls.defects import Row

PROPERTY_PACKAGES = ("properties", "interpretations")


def suite_properties() -> dict[str, set[str]]:
    """Every claim's property function names, from every property module of the suite (imported here)."""
    for package_name in PROPERTY_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.iter_modules(package.__path__):
            if module.name.startswith("test_"):
                importlib.import_module(f"{package_name}.{module.name}")
    return {slug: {name.rpartition("::")[2] for name in names} for slug, names in PROPERTIES.items()}


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
