"""Every test implementation is caught exactly as tests/fixtures/catches.toml says (tests/fixtures/expectation_groups.py
runs them, a few groups of subjects per run): each catch of a wrong one fails, unexpectedly, in each of its dtypes,
nothing fails outside its catches, and a correct one (no catches) passes what it must, its documented deviations
declared."""

from __future__ import annotations

import functools

import pytest

from harness.reporting.catches import missed
from protocol.registry import load_impl
from tests.fixtures.expectation_groups import GROUPS, catches_for, group_run
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
def test_the_subject_is_caught_exactly(group, target, tmp_path_factory):
    """Each of its catches fails in each of its dtypes, nothing fails outside them; a correct one (no catches)
    passes the claims its group names (every claim outside a catch, in a strict group, or declared)."""
    run = _run(group, tmp_path_factory)
    spec = GROUPS[group]
    subject, dtypes = _subject(target)
    assert run.report is not None, run.output[-3000:]
    assert {f"{subject}[{d}]" for d in dtypes} <= set(run.report["impls"]), (subject, run.report["impls"])
    catches = catches_for(subject)
    assert missed(subject, catches, run.report) == ()
    verdicts = _verdicts(run, subject)
    caught = {(c.claim, f"{subject}[{d}]") for c in catches for d in c.dtypes}
    if spec.strict:
        assert all(v["status"] == "pass" or v["declared"] or (v["claim"], v["impl"]) in caught for v in verdicts), \
            [(v["impl"], v["claim"], v["status"]) for v in verdicts if v["status"] != "pass" and not v["declared"]]
    for dtype in dtypes:
        for claim in spec.passes.get(subject, ()):
            verdict = run.verdict(claim, f"{subject}[{dtype}]")
            assert verdict is not None and verdict["status"] == "pass", (subject, dtype, claim, verdict)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_the_group_run_ends_as_its_catches_say(group, tmp_path_factory):
    """No error or broken collection in the run: it exits 1 exactly when one of its subjects has catches (their
    failures are unexpected by design), 0 otherwise, and every unexpected failure is a catch."""
    run = _run(group, tmp_path_factory)
    subjects = {_subject(target)[0] for target in GROUPS[group].targets}
    caught = {(c.claim, f"{s}[{d}]") for s in subjects for c in catches_for(s) for d in c.dtypes}
    unexpected = {(v["claim"], v["impl"]) for v in run.report["verdicts"]
                  if v["status"] in ("fail", "error") and not v["declared"]}
    assert unexpected <= caught, (unexpected - caught, run.output[-3000:])
    assert run.returncode == (1 if caught else 0), run.output[-3000:]
