"""What the deliberately wrong implementations must break (harness.reporting.catches): the zoo's and the tests'
catches files are read and validated, name only claims and subjects that exist, every wrong implementation of the
zoo has some, and `missed` finds a catch no failure met and a failure outside every catch, and nothing when a subject
is caught exactly."""

from __future__ import annotations

import pytest

from harness.reporting.catches import Catch, CatchesError, catches_text, load_catches, missed, parse_catches
from protocol.registry import load_impl
from specs.catalogue import load_claims
from tests.fixtures.expectation_groups import CATCHES, GROUPS
from zoo.defects import CATCHES as ZOO_CATCHES
from zoo.defects import DEFECTS

TEXT = """
[[catch]]
subject = ["wrong-x", "wrong-y"]
claim = ["rows-sum-to-one", "sdpa-formula"]
dtypes = ["float64", "float32"]
why = "columns sum to 1"
reported = "here: a test"
"""
CATCH = Catch("wrong-x", "rows-sum-to-one", ("float64", "float32"), "columns sum to 1", "here")


def test_a_catch_for_several_subjects_and_claims_is_one_catch_each():
    found = parse_catches(TEXT, "t.toml")
    assert {(c.subject, c.claim) for c in found} == {(s, c) for s in ("wrong-x", "wrong-y")
                                                     for c in ("rows-sum-to-one", "sdpa-formula")}
    assert parse_catches(catches_text(list(found)), "again.toml") == found


@pytest.mark.parametrize("edit, message", [
    (('why = "columns sum to 1"\n', ""), "a catch has exactly the fields"),
    (('why = "columns sum to 1"', 'why = " "'), "`why` is a sentence"),
    (('subject = ["wrong-x", "wrong-y"]', "subject = []"), "`subject` must be a name or a non-empty list"),
    (("[[catch]]", "[[row]]"), "holds [[catch]] tables only"),
    (("[[catch]]", "[[catch]"), "not valid TOML"),
])
def test_a_malformed_catch_names_the_problem(edit, message):
    with pytest.raises(CatchesError) as info:
        parse_catches(TEXT.replace(*edit), "t.toml")
    assert message in str(info.value)


def _verdict(impl: str, claim: str, status: str, expected: bool) -> dict:
    return {"impl": impl, "claim": claim, "status": status, "declared": expected, "detail": f"{claim} {status}"}


CAUGHT = (_verdict("wrong-x[float64]", "rows-sum-to-one", "fail", False),
          _verdict("wrong-x[float32]", "rows-sum-to-one", "fail", False),
          _verdict("wrong-x[float64]", "sdpa-formula", "pass", False),
          _verdict("wrong-xy[float64]", "sdpa-formula", "fail", False))  # another subject's failure: not its


def test_a_subject_caught_exactly_misses_nothing():
    assert missed("wrong-x", (CATCH,), {"verdicts": list(CAUGHT)}) == ()
    assert missed("correct-y", (), {"verdicts": [_verdict("correct-y[float64]", "sdpa-formula", "pass", False)]}) == ()


@pytest.mark.parametrize("replaced, expected", [
    (_verdict("wrong-x[float32]", "rows-sum-to-one", "pass", False), "wrong-x[float32]: rows-sum-to-one not caught"),
    (_verdict("wrong-x[float32]", "rows-sum-to-one", "fail", True), "wrong-x[float32]: rows-sum-to-one not caught"),
])
def test_a_catch_that_passed_or_was_declared_in_one_dtype_is_missed(replaced, expected):
    (problem,) = missed("wrong-x", (CATCH,), {"verdicts": [CAUGHT[0], replaced, CAUGHT[2]]})
    assert problem.startswith(expected)


def test_a_failure_outside_every_catch_is_missed():
    report = {"verdicts": [*CAUGHT[:2], _verdict("wrong-x[float64]", "sdpa-formula", "fail", False)]}
    (problem,) = missed("wrong-x", (CATCH,), report)
    assert problem.startswith("wrong-x[float64]: sdpa-formula fail outside its catches")
    assert missed("correct-y", (), {"verdicts": [_verdict("correct-y[float64]", "sdpa-formula", "error", False)]})


def test_an_expected_failure_outside_the_catches_is_not_missed():
    """A false seed sentence's refutation, or what the subject's own deviations explain, is no catch's business."""
    report = {"verdicts": [*CAUGHT, _verdict("wrong-x[float64]", "sdpa-formula", "fail", True)]}
    assert missed("wrong-x", (CATCH,), report) == ()


def _names(targets) -> set[str]:
    try:
        return {load_impl(target).name for target in targets}
    except ImportError as exc:
        pytest.skip(f"{exc.name} is not installed")


@pytest.mark.parametrize("path", [ZOO_CATCHES, CATCHES], ids=["zoo", "tests"])
def test_the_catches_name_only_claims_and_subjects_that_exist(path):
    found = load_catches(path)
    assert found
    claims = load_claims()
    targets = [target for group in GROUPS.values() for target in group.targets] + [d.target for d in DEFECTS]
    subjects = _names(targets) | set(targets)
    assert [c for c in found if c.claim not in claims or c.subject not in subjects] == []
    assert all(claims[c.claim].holds for c in found)  # a refuted sentence fails everywhere: no catch of its own


def test_every_wrong_implementation_of_the_zoo_has_catches():
    """The zoo's list is its catches file (zoo/defects.py): a wrong implementation without catches would never run,
    so every public function of zoo/wrong.py, zoo/wrong_faces.py, zoo/wrong_triton.py and zoo/wrong_sharded.py,
    and the six of zoo/declared.py, must have some."""
    from zoo import declared, wrong, wrong_faces, wrong_sharded, wrong_triton

    modules = (wrong, wrong_faces, wrong_triton, wrong_sharded)
    functions = [f"zoo/{module.__name__.rpartition('.')[2]}.py:{name}" for module in modules
                 for name, value in vars(module).items()
                 if callable(value) and not name.startswith("_") and value.__module__ == module.__name__]
    functions += [f"zoo/declared.py:{name}" for name in declared.DEFECTIVE]
    assert sorted(d.target for d in DEFECTS) == sorted(functions)
    assert all(d.mistake and d.source and d.breaks for d in DEFECTS)
