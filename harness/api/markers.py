"""`@checks(...)`: ties a property to the claims it encodes.

The decorator records the property in a registry (so the suite can prove that
every checkable claim has one) and adds the `claims` pytest marker the report
plugin reads. Properties without an `impl` argument check the float64 oracle or
a piece of seed code; `subject` names what their verdict is about. It also makes the
property run a failing example again under its cell's documented deviations
(harness.api.explained_runs): for a Hypothesis property, the inner test each example
runs; for a fixed case, the test itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import pytest

from harness.api.explained_runs import explained

ORACLE = "oracle"
PROPERTIES: dict[str, list[str]] = defaultdict(list)


def checks(*slugs: str, subject: str = ORACLE) -> Callable:
    """Mark a test as checking `slugs`; `subject` is used when it takes no `impl`."""
    if not slugs:
        raise ValueError("@checks needs at least one claim slug")

    def mark(test: Callable) -> Callable:
        for slug in slugs:
            PROPERTIES[slug].append(f"{test.__module__}::{test.__name__}")
        if hasattr(test, "hypothesis"):  # Hypothesis documents inner_test as the one to replace
            test.hypothesis.inner_test = explained(test.hypothesis.inner_test)
        else:
            test = explained(test)
        return pytest.mark.claims(*slugs, subject=subject)(test)

    return mark
