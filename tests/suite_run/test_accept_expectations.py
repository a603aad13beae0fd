"""--accept-expectations (harness.pytest_plugin.accept): a run's measurements written as rows of the table, each
generated symptom specific; and every hand-written row of impls/expectations.toml specific too: none matches the empty
string, nor every one of the harness's ordinary failure messages (a raise, a wrong shape, a NaN, an output
off the oracle), which any bug of any claim can produce."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.trial import check_against_oracle
from harness.engine.declarations import RUNNING, RunningCheck
from harness.engine.verdicts import Outcome, blame
from harness.pytest_plugin.accept import headline_pattern, measured_rows, symptom, table_text, unspecific
from protocol.expectations import load_table, parse_sections, parse_table
from protocol.known_defects import Row
from protocol.registry import Variant, load_impl
from specs.problems import build
from specs.reference import attention
from tests.fixtures.runs import run_suite

RECORD = "impls.numpy.numpy_tiled:tiled_attention"  # a built-in record with no rows


def _oracle(q, k, v):
    return attention(q, k, v).out


def _raises(q, k, v):
    raise RuntimeError("an illegal memory access was encountered")


def _wrong_shape(q, k, v):
    return np.zeros(q.shape[:-1] + (v.shape[-1] + 1,))


def _nan(q, k, v):
    return np.full(q.shape[:-1] + v.shape[-1:], np.nan)


def _one_row_off(q, k, v):
    out = _oracle(q, k, v)
    out[..., -1, :] += 0.1
    return out


def _message(output) -> str:
    """The harness's failure message for `output` in place of a record, run as sdpa-formula's property."""
    impl = load_impl(RECORD)
    variant = Variant(dataclasses.replace(impl, fn=lambda q, k, v, **kw: output(q, k, v),
                                          target=f"{__name__}:{output.__name__}"), "float64")
    token = RUNNING.set(RunningCheck("test_output_matches_oracle", ("sdpa-formula",)))
    try:
        with pytest.raises(PropertyViolation) as info:
            check_against_oracle(variant, build(n_q=9, n_k=11, d=8, d_v=8, seed=3))
    finally:
        RUNNING.reset(token)
    return info.value.message()


@pytest.fixture(scope="module")
def ordinary_failures() -> list[str]:
    return [_message(wrong) for wrong in (_raises, _wrong_shape, _nan, _one_row_off)]


def test_the_ordinary_failures_differ(ordinary_failures):
    assert len({m.splitlines()[0] for m in ordinary_failures}) == 4


def test_every_row_of_the_table_is_specific(ordinary_failures):
    for row in load_table():
        assert unspecific(row.match, ordinary_failures) is None, (row.subject, row.claim, row.match)


@pytest.mark.parametrize("pattern", ["", ".*", "x?", "(?s:.*)", "e", "out|raised|returned"])
def test_a_symptom_matching_anything_is_rejected(pattern, ordinary_failures):
    assert unspecific(pattern, ordinary_failures) is not None


def test_a_generated_symptom_matches_its_own_messages_only(ordinary_failures):
    off = ordinary_failures[3]
    again = _message(lambda q, k, v: _one_row_off(q, k, v) * 1.5)  # the same failure, other numbers
    pattern = symptom([off, again])
    assert pattern == headline_pattern(off) and pattern.startswith("^")
    assert all(re.search(pattern, m) for m in (off, again))
    assert unspecific(pattern, ordinary_failures[:3]) is None
    both = symptom([off, ordinary_failures[2]])
    assert "|" in both and unspecific(both, ordinary_failures[:2]) is None
    with pytest.raises(ValueError):
        symptom([])


def test_a_generated_symptom_generalises_numbers_not_the_digits_of_names():
    pattern = headline_pattern("out differs from the float64 oracle at n_k=129, scale -1.5e-3, sm_80")
    assert re.search(pattern, "out differs from the float64 oracle at n_k=7, scale 2, sm_80")
    assert not re.search(pattern, "out differs from the float16 oracle at n_k=7, scale 2, sm_80")
    assert not re.search(pattern, "out differs from the float64 oracle at n_k=7, scale 2, sm_90")


def test_a_generated_symptom_takes_a_list_of_numbers_of_any_length():
    pattern = headline_pattern("out rows that see none of the keys [3, 4] holding nan at out[0, 1, 2, 3]")
    assert re.search(pattern, "out rows that see none of the keys [5] holding nan at out[0, 0, 1, 2]")
    assert not re.search(pattern, "out rows that see none of the keys [] holding nan at out[0, 0, 1, 2]")


def _builtin(rows: tuple[Row, ...]) -> Variant:
    return Variant(dataclasses.replace(load_impl(RECORD), known_defects=rows), "float64")


def _failed(variant: Variant, claim: str, prop: str, *messages: str) -> Outcome:
    """The outcome the plugin records for a test of `claim` failing with `messages` (several: Hypothesis' multiple
    bugs), judged by the run's own rule (harness.engine.verdicts.blame)."""
    (outcome,) = blame((claim,), variant, prop, [(None, message) for message in messages])[0].values()
    outcome.nodeid, outcome.detail = f"t::{prop}", "\n\n".join(messages)
    return outcome


def test_measured_rows_keep_what_caught_drop_what_did_not_and_add_what_was_unexpected(ordinary_failures):
    caught = Row("numpy-tiled", "sdpa-formula", "why", ("float64",), (), r"^returned nan at out", "here: a test")
    idle = Row("numpy-tiled", "rows-sum-to-one", "why", ("float64",), (), r"^row sums", "here: a test")
    variant = _builtin((caught, idle))
    outcomes = {("sdpa-formula", variant.name): [_failed(variant, "sdpa-formula", "test_a", ordinary_failures[2])],
                ("layout-independent", variant.name): [_failed(variant, "layout-independent", "test_b",
                                                               ordinary_failures[3])],
                ("rows-sum-to-one", variant.name): [Outcome("pass", "t::c", "test_c")]}
    rows, problems = measured_rows([variant], outcomes, frozenset({variant.impl.target}))
    mine = [row for row in rows["row"] if row.subject == "numpy-tiled"]
    assert problems == []
    assert caught in mine and idle not in mine and len(mine) == 2
    new = next(row for row in mine if row.claim == "layout-independent")
    assert new.dtypes == ("float64",) and new.covers("layout-independent", "float64", "test_b", ordinary_failures[3])
    assert not new.covers("layout-independent", "float64", "test_b", ordinary_failures[2])
    others = [row for row in load_table() if row.subject != "numpy-tiled"]
    assert [row for row in rows["row"] if row.subject != "numpy-tiled"] == sorted(
        others, key=lambda row: (row.subject, row.claim, row.dtypes))  # records that did not run keep their rows
    assert set(rows["fixture"]) == set(load_table(section="fixture"))  # so do the tests' implementations
    written = parse_sections(table_text(rows))  # the written file is a table
    assert {section: set(found) for section, found in written.items()} == {
        section: set(found) for section, found in rows.items()}


def test_a_declared_failure_reported_beside_an_undeclared_one_covers_only_itself(ordinary_failures):
    """Hypothesis reports a declared and an undeclared failure of one property together (report_multiple_bugs): the
    row that explains one part is kept, and the other part still becomes a row of its own."""
    caught = Row("numpy-tiled", "sdpa-formula", "why", ("float64",), (), r"^returned nan at out", "here: a test")
    variant = _builtin((caught,))
    both = _failed(variant, "sdpa-formula", "test_a", ordinary_failures[2], ordinary_failures[3])
    assert not both.expected and caught.covers("sdpa-formula", "float64", "test_a", both.detail)
    rows, problems = measured_rows([variant], {("sdpa-formula", variant.name): [both]},
                                   frozenset({variant.impl.target}))
    mine = [row for row in rows["row"] if row.subject == "numpy-tiled"]
    assert problems == [] and caught in mine and len(mine) == 2
    (new,) = [row for row in mine if row != caught]
    assert new.covers("sdpa-formula", "float64", "test_a", ordinary_failures[3])
    assert not new.covers("sdpa-formula", "float64", "test_a", ordinary_failures[2])


def test_an_implementation_run_by_impl_is_measured_into_the_fixture_section(ordinary_failures):
    """The tests' and the zoo's implementations (not records) get `[[fixture]]` rows; its own `known_defects`
    stay on the function (a failure they cover is neither kept nor new)."""
    own = Row("tests-own", "rows-sum-to-one", "why", ("float64",), (), r"^returned nan at out")
    variant = Variant(dataclasses.replace(load_impl(RECORD), name="tests-own", target="tests/x.py:own",
                                          known_defects=(own,)), "float64")
    outcomes = {("rows-sum-to-one", variant.name): [_failed(variant, "rows-sum-to-one", "test_a",
                                                            ordinary_failures[2])],
                ("sdpa-formula", variant.name): [_failed(variant, "sdpa-formula", "test_b", ordinary_failures[3])]}
    rows, problems = measured_rows([variant], outcomes, frozenset())
    assert problems == [] and set(rows["row"]) == set(load_table())
    (new,) = [row for row in rows["fixture"] if row.subject == "tests-own"]
    assert new.claim == "sdpa-formula" and new.covers("sdpa-formula", "float64", "test_b", ordinary_failures[3])


def test_a_generated_symptom_that_is_not_specific_is_reported(ordinary_failures):
    variant = _builtin(())
    same = ordinary_failures[3]
    outcomes = {("sdpa-formula", variant.name): [_failed(variant, "sdpa-formula", "test_a", same)],
                ("layout-independent", variant.name): [_failed(variant, "layout-independent", "test_b", same)]}
    _, problems = measured_rows([variant], outcomes, frozenset({variant.impl.target}))
    assert len(problems) == 2 and all("matches every other failure message" in p for p in problems)


def test_a_run_writes_its_rows_under_the_ci_profile_only(tmp_path):
    args = ("properties/test_formula.py::test_values_of_another_length_are_rejected",
            "--impl", "impls.seeds.seed002_tiled:hardware_aware_attention", "--long-regimes", "no")
    written = tmp_path / "accepted.toml"
    run = run_suite(*args, "--accept-expectations", str(written))
    assert run.returncode == 0, run.output[-3000:]
    rows = parse_table(written.read_text())
    table = [row for row in load_table() if row.subject == "seed002-hardware-aware"]
    assert [row for row in rows if row.subject == "seed002-hardware-aware"] == \
        [row for row in table if row.claim == "one-key-per-value"]  # the one row this run caught
    dev = run_suite(*args, "--accept-expectations", str(tmp_path / "dev.toml"), profile="dev")
    assert dev.returncode == 1 and "needs the derandomized ci profile" in dev.output
    assert not (tmp_path / "dev.toml").exists()
