"""Every test implementation meets exactly its rows of impls/expectations.toml (tests/fixtures/expectation_groups.py
runs them, a few groups of subjects per run): each row of a wrong one is caught (its claim fails in each of its
dtypes, covered by the row), nothing fails outside a row, and a correct one (no rows) passes what it must."""

from __future__ import annotations

import functools

import pytest

from harness.reporting.rows_met import missed_rows
from protocol.expectations import rows_for
from protocol.registry import load_impl
from tests.fixtures.expectation_groups import GROUPS, group_run
from tests.fixtures.runs import SuiteRun


@functools.cache
def _subject(target: str) -> tuple[str, tuple[str, ...]]:
    """The name a run reports `target` by (without [dtype]), and its dtypes."""
    impl = load_impl(target)
    return impl.name, impl.capabilities.dtypes


def _run(name: str, tmp_path_factory) -> SuiteRun:
    reason = GROUPS[name].unavailable and GROUPS[name].unavailable()
    if reason:
        pytest.skip(reason)
    return group_run(name, tmp_path_factory)


def _verdicts(run: SuiteRun, subject: str) -> list[dict]:
    return [v for v in run.report["verdicts"] if v["impl"].rpartition("[")[0] == subject]


CASES = [(group, target) for group, spec in GROUPS.items() for target in spec.targets]


@pytest.mark.parametrize("group, target", CASES, ids=[f"{g}-{t.rpartition(':')[2]}" for g, t in CASES])
def test_the_subject_meets_exactly_its_rows(group, target, tmp_path_factory):
    """Each of its rows caught in each of its dtypes, no failure outside them; a correct one (no rows) passes the
    claims its group names (every claim outside a row, in a strict group)."""
    run = _run(group, tmp_path_factory)
    spec = GROUPS[group]
    subject, dtypes = _subject(target)
    assert run.report is not None, run.output[-3000:]
    assert {f"{subject}[{d}]" for d in dtypes} <= set(run.report["impls"]), (subject, run.report["impls"])
    assert missed_rows(subject, rows_for(subject, dtypes), run.report) == ()
    verdicts = _verdicts(run, subject)
    if spec.strict:
        assert all(v["status"] == "pass" or v["expected"] for v in verdicts), \
            [(v["impl"], v["claim"], v["status"]) for v in verdicts if v["status"] != "pass" and not v["expected"]]
    for dtype in dtypes:
        for claim in spec.passes.get(subject, ()):
            verdict = run.verdict(claim, f"{subject}[{dtype}]")
            assert verdict is not None and verdict["status"] == "pass", (subject, dtype, claim, verdict)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_the_group_run_ends_well(group, tmp_path_factory):
    """No unexpected failure, error or broken collection in the run (exit status 0)."""
    run = _run(group, tmp_path_factory)
    assert run.returncode == 0, run.output[-3000:]
