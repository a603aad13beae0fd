"""Rows of the expectations table that name what no longer exists, found before a run starts.

A row naming a claim the catalogue lacks, or a subject no built-in record is named, would never be caught again, or
would cover nothing: the run stops at start with every such row listed (harness.pytest_plugin.plugin), instead of
failing far away from the rename. suite_properties reads which properties check each claim from the source.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from protocol.expectation_rows import Expectation


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


def stale_rows(rows: Iterable[Expectation], claims: Iterable[str], subjects: set[str] | None) -> list[str]:
    """One line per row naming a claim not in `claims` or a subject not in `subjects` (None: not checked)."""
    known = set(claims)
    problems = []
    for row in rows:
        where = f"({row.subject}, {row.claim}, {', '.join(row.dtypes)})"
        if row.claim not in known:
            problems.append(f"{where}: the claim '{row.claim}' is not in the catalogue (specs/claims.toml)")
            continue
        if subjects is not None and row.subject not in subjects:
            problems.append(f"{where}: no built-in record is named '{row.subject}' (impls/records.py)")
    return problems
