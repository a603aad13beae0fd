"""harness.reporting.rows_met.missed_rows, what the runner of the tests' implementations and the zoo assert empty: it
finds a row no failure met (its claim passed, failed outside it, or the run listed it uncaught) and a failure outside
every row, and nothing when a subject meets exactly its rows."""

from __future__ import annotations

from harness.reporting.rows_met import missed_rows
from protocol.known_defects import Row

ROW = Row("wrong-x", "rows-sum-to-one", "columns sum to 1", ("float64", "float32"), (), "do not sum to 1", "here")


def _verdict(impl: str, claim: str, status: str, expected: bool) -> dict:
    return {"impl": impl, "claim": claim, "status": status, "expected": expected, "detail": f"{claim} {status}"}


def _report(*verdicts: dict, uncaught: tuple[str, ...] = ()) -> dict:
    return {"verdicts": list(verdicts), "uncaught_declared_defects": list(uncaught)}


CAUGHT = (_verdict("wrong-x[float64]", "rows-sum-to-one", "fail", True),
          _verdict("wrong-x[float32]", "rows-sum-to-one", "fail", True),
          _verdict("wrong-x[float64]", "sdpa-formula", "pass", False),
          _verdict("wrong-xy[float64]", "sdpa-formula", "fail", False))  # another subject's failure: not its


def test_a_subject_meeting_exactly_its_rows_misses_nothing():
    assert missed_rows("wrong-x", (ROW,), _report(*CAUGHT)) == ()
    assert missed_rows("correct-y", (), _report(_verdict("correct-y[float64]", "sdpa-formula", "pass", False))) == ()


def test_a_row_whose_claim_passed_in_one_dtype_is_missed():
    report = _report(CAUGHT[0], _verdict("wrong-x[float32]", "rows-sum-to-one", "pass", False), CAUGHT[2])
    (missed,) = missed_rows("wrong-x", (ROW,), report)
    assert missed.startswith("wrong-x[float32]: not caught as rows-sum-to-one")


def test_a_row_the_run_lists_uncaught_is_missed():
    line = f"WARNING: wrong-x[float64] declares a known defect that no property caught: {ROW.describe()}"
    (missed,) = missed_rows("wrong-x", (ROW,), _report(*CAUGHT, uncaught=(line,)))
    assert missed.startswith("wrong-x[float64]: not caught")


def test_a_row_whose_claim_did_not_run_is_missed():
    assert len(missed_rows("wrong-x", (ROW,), _report(*CAUGHT[2:]))) == 2  # both dtypes


def test_a_failure_outside_every_row_is_missed():
    report = _report(*CAUGHT[:2], _verdict("wrong-x[float64]", "sdpa-formula", "fail", False))
    (missed,) = missed_rows("wrong-x", (ROW,), report)
    assert missed.startswith("wrong-x[float64]: sdpa-formula fail outside its rows")
    errored = _report(_verdict("correct-y[float64]", "sdpa-formula", "error", False))
    assert missed_rows("correct-y", (), errored) != ()
