"""Regimes as pytest cases: long ones carry the `long_regime` marker, and a case an implementation cannot
take (a capability it lacks, a length past its max_seq) is skipped with the reason.

`--long-regimes auto` (the default) runs the long cases when implementations are named with `--impl` and
skips them, with the reason, in a run over every built-in (which runs them as `tox -e long`).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from protocol.registry import Variant
from specs.problems import Problem
from specs.regimes import Regime

LONG_MARKER = "long_regime"


def cases(regimes: Iterable[Regime]) -> list:
    """pytest parameters, one per regime, ids its name, the long ones marked."""
    return [pytest.param(r, id=r.name, marks=[getattr(pytest.mark, LONG_MARKER)] if r.long else [])
            for r in regimes]


def skip_unless_fits(variant: Variant, regime: Regime) -> Problem:
    """The regime's problem, or a skip naming what the implementation lacks."""
    caps = variant.capabilities
    reason = caps.lacking(*regime.needs)
    if reason:
        pytest.skip(reason)
    longest = max(regime.recipe.get("n_q", 1), regime.recipe.get("n_k", 1))
    if caps.max_seq is not None and longest > caps.max_seq:
        pytest.skip(f"declared max_seq={caps.max_seq} < {longest}")
    return regime.problem()


def long_regimes_wanted(option: str, impls_named: bool) -> bool:
    """Whether long regimes run: `yes`, `no`, or `auto` (with --impl)."""
    return option == "yes" or (option == "auto" and impls_named)

