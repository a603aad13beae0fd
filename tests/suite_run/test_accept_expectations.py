"""--accept-expectations (harness.pytest_plugin.accept, harness.api.explained_runs): a run's measurements written as
rows of the table. A row whose deviation explained an example is kept as it stands, one that explained nothing is
dropped, an example nothing declared explains gets the narrowest documented deviation that explains every element
(the fewest elements explained), and what no deviation explains is reported; the written file is a table, and a run
with it accepts nothing new (one run converges)."""

from __future__ import annotations

import dataclasses
import shutil
from unittest import mock

import pytest

from harness.engine.verdicts import Outcome, RunState, uncaught_declarations
from harness.pytest_plugin.accept import measured_rows, table_text
from protocol.expectation_rows import Expectation
from protocol.expectations import load_table, parse_table
from protocol.registry import Variant, load_impl
from specs.catalogue import load_claims
from specs.deviations import deviation_from_fields
from tests.fixtures.runs import ROOT, run_suite

RECORD = "impls.numpy.numpy_tiled:tiled_attention"  # a built-in record with no rows
FIXTURES = "tests/fixtures/deviation_impls.py"
IGNORED = shutil.ignore_patterns(".git", ".tox", "__pycache__", ".hypothesis", "*.egg-info")


def _row(claim: str, name: str, dtypes: tuple[str, ...] = ("float64",), **params) -> Expectation:
    return Expectation("numpy-tiled", claim, "why", dtypes, deviation_from_fields(name, params, "test"),
                       "here: a test")


def _state(rows: tuple[Expectation, ...], dtypes: tuple[str, ...], ran: tuple[str, ...]) -> RunState:
    """A run of the record, declaring `rows`, in `dtypes`, where each claim of `ran` had its one property pass."""
    impl = dataclasses.replace(load_impl(RECORD), expectations=rows)
    state = RunState([Variant(impl, dtype) for dtype in dtypes], [], load_claims(), builtin=frozenset({RECORD}))
    for claim in ran:
        prop = f"properties.test_x::test_{claim}"
        state.registered[claim].add(prop)
        for variant in state.variants:
            state.collected[(claim, variant.name)].add(prop)
            state.outcomes[(claim, variant.name)].append(Outcome("pass", "t::a", f"test_{claim}", ""))
    return state


def _measured(state: RunState, rows: tuple[Expectation, ...]) -> tuple[list[Expectation], list[str]]:
    with mock.patch("harness.pytest_plugin.accept.load_table", return_value=(*load_table(), *rows)):
        return measured_rows(state)


def test_measured_rows_keep_what_explained_drop_what_did_not_and_add_what_was_accepted():
    """A row of a claim the run checked is kept where it explained an example and dropped where it did not; a row of
    a claim the run did not check (a run of some properties) is kept as it stands."""
    fired, idle = _row("sdpa-formula", "float32-softmax"), _row("rows-sum-to-one", "keyless-row-mean")
    unchecked = _row("causal-alignment", "keyless-row-nan")
    table = (fired, idle, unchecked)
    state = _state(table, ("float64",), ran=("sdpa-formula", "rows-sum-to-one"))
    (variant,) = state.variants
    state.triggered.add((variant.name, 0))
    state.accepted[(variant.name, "layout-independent")] = [("keyless-row-nan", {})]
    rows, problems = _measured(state, table)
    mine = [row for row in rows if row.subject == "numpy-tiled"]
    assert problems == []
    assert fired in mine and idle not in mine and unchecked in mine and len(mine) == 3
    (new,) = [row for row in mine if row.claim == "layout-independent"]
    assert new.deviation.describe() == "keyless-row-nan" and new.dtypes == ("float64",)
    assert "say why" in new.why and "say where" in new.reported  # the reviewer writes them
    others = {row for row in load_table() if row.subject != "numpy-tiled"}
    assert {row for row in rows if row.subject != "numpy-tiled"} == others  # records that did not run keep theirs
    assert set(parse_table(table_text(rows))) == set(rows)  # the written file is a table


def test_a_row_is_written_in_the_dtypes_it_explained_and_the_run_judges_the_file_caught():
    """A row of two dtypes whose deviation explained an example in one and nothing in the other (where its claim's
    property ran) is written with the one: the dtypes the run reports uncaught are exactly those the file leaves
    out. A dtype whose claim did not run keeps the row."""
    both = _row("sdpa-formula", "float32-softmax", dtypes=("float32", "float64"))
    state = _state((both,), ("float32", "float64"), ran=("sdpa-formula",))
    first, second = state.variants
    state.triggered.add((second.name, 0))
    assert uncaught_declarations(state) == [(first, both)]
    rows, _ = _measured(state, (both,))
    (narrowed,) = [row for row in rows if row.subject == "numpy-tiled"]
    assert narrowed.dtypes == ("float64",)
    written = _state((narrowed,), ("float32", "float64"), ran=("sdpa-formula",))
    written.triggered.add((written.variants[1].name, 0))
    assert uncaught_declarations(written) == []  # the file as written draws no report from the same run
    unrun = _state((both,), ("float32", "float64"), ran=())
    rows, _ = _measured(unrun, (both,))
    assert [row.dtypes for row in rows if row.subject == "numpy-tiled"] == [("float32", "float64")]


def test_a_failure_no_deviation_explains_is_reported():
    state = _state((), ("float64",), ran=())
    (variant,) = state.variants
    state.outcomes[("sdpa-formula", variant.name)].append(Outcome("fail", "t::a", "test_a", "out differs"))
    _, problems = _measured(state, ())
    assert problems == [f"({variant.name}, sdpa-formula): no documented deviation explains out differs"]


def _accepted(run_dir, *args, root=ROOT):
    written = run_dir / "accepted.toml"
    run = run_suite(*args, "--accept-expectations", str(written), report_dir=run_dir, root=root)
    return run, written


def test_accept_mode_writes_the_narrowest_deviation_and_converges_in_one_run(tmp_path):
    """The float16 formula's overflow is explained both by scores-overflow-dtype (the rows whose scores leave the
    range) and by exp-without-max-shift (the ratio of exponential sums, every element of every row): accept mode
    writes the narrower. With its rows in the table a second run accepts nothing new and writes the same rows."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=IGNORED)
    target = "impls.numpy.numpy_reference:reference_attention"
    args = ("properties/test_stability.py", "--claims", "online-softmax-avoids-overflow", "--impl", target)
    table = tree / "impls" / "expectations.toml"
    others = [row for row in parse_table(table.read_text()) if row.subject != "numpy-reference"]
    table.write_text(table_text(others), encoding="utf-8")  # the record starts with no row
    run, written = _accepted(tmp_path / "first", *args, root=tree)
    assert run.returncode == 0, run.output[-3000:]
    (row,) = [row for row in parse_table(written.read_text()) if row.subject == "numpy-reference"]
    assert (row.claim, row.dtypes, row.deviation.describe()) == (
        "online-softmax-avoids-overflow", ("float16",), "scores-overflow-dtype")
    shutil.copy(written, table)
    again, rewritten = _accepted(tmp_path / "second", *args, root=tree)
    assert again.returncode == 0, again.output[-3000:]
    assert set(parse_table(rewritten.read_text())) == set(parse_table(written.read_text()))
    verdict = again.verdict("online-softmax-avoids-overflow", "numpy-reference[float16]")
    assert verdict["status"] == "fail" and verdict["declared"], verdict


def test_a_run_writes_its_rows_under_the_ci_profile_only(tmp_path):
    args = ("properties/test_formula.py::test_values_of_another_length_are_rejected",
            "--impl", "impls.seeds.seed002_tiled:hardware_aware_attention", "--long-regimes", "no")
    run, written = _accepted(tmp_path / "ci", *args)
    assert run.returncode == 0, run.output[-3000:]
    accepted = {(row.claim, row.deviation.name) for row in parse_table(written.read_text())
                if row.subject == "seed002-hardware-aware"}
    assert ("one-key-per-value", "accepts") in accepted, accepted  # the one claim this run checked
    dev = run_suite(*args, "--accept-expectations", str(tmp_path / "dev.toml"), profile="dev")
    assert dev.returncode == 1 and "needs the derandomized ci profile" in dev.output
    assert not (tmp_path / "dev.toml").exists()


@pytest.mark.parametrize("fixture, name", [("keyless_row_nan", "keyless-row-nan"),
                                           ("float32_softmax", "float32-softmax")])
def test_an_outside_implementation_gets_its_deviation_measured_too(fixture, name, tmp_path):
    """An implementation run by --impl (not a record) is measured into the same file, under its target, for its
    author to move into its `known_defects`."""
    target = f"{FIXTURES}:{fixture}"
    run, written = _accepted(tmp_path, "properties/test_masking.py", "properties/test_formula.py", "--claims",
                             "sdpa-formula,fully-masked-rows-zero", "--impl", target, "--long-regimes", "no")
    assert run.returncode == 0, run.output[-3000:]
    assert {row.deviation.name for row in parse_table(written.read_text()) if row.subject == target} == {name}
