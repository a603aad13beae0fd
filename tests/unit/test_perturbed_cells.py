"""tools/perturbed_cells.py reads a run and its twin: a declared cell the twin still declares is hidden, one it
fails unexpectedly is caught, one it passes was not reached, one whose twin failure is its false sentence's
refutation is refuted (never caught); a refuted seed sentence is not a declared cell."""

from __future__ import annotations

from tools.perturbed_cells import REFUTED, declared_cells, judge, old_table_covers


def _verdict(impl, claim, status, expected=False, why="", detail="out differs"):
    return dict(impl=impl, claim=claim, status=status, declared=expected, why=why, detail=detail,
                failed_properties=["test_x"])


RUN = {"verdicts": [_verdict("a[float64]", "c1", "fail", True), _verdict("a[float64]", "c2", "fail", True),
                    _verdict("a[float64]", "c3", "fail", True), _verdict("a[float64]", "c4", "pass"),
                    _verdict("seed[float64]", "c5", "fail", True, why=REFUTED + ": ..."),
                    _verdict("seed[float64]", "c6", "fail", True)]}
TWIN = {"verdicts": [_verdict("a[float64]", "c1", "fail"), _verdict("a[float64]", "c2", "fail", True),
                     _verdict("a[float64]", "c3", "pass"), _verdict("a[float64]", "c4", "pass"),
                     _verdict("seed[float64]", "c6", "fail", True, why=REFUTED + ": ...")]}


def test_the_cells_are_caught_hidden_not_reached_or_refuted():
    assert declared_cells(RUN) == [("a[float64]", "c1"), ("a[float64]", "c2"), ("a[float64]", "c3"),
                                   ("seed[float64]", "c6")]
    result = judge(RUN, TWIN)
    assert (result["cells"], result["caught"], result["hidden"], result["not reached"], result["refuted"]) == (
        4, [["a[float64]", "c1"]], [["a[float64]", "c2"]], [["a[float64]", "c3"]], [["seed[float64]", "c6"]])


def test_the_old_tables_rule_is_its_pattern_over_the_message():
    rows = [{"subject": "a", "claim": "c1", "dtypes": ["float64"], "match": "out differs", "properties": []}]
    assert old_table_covers(rows, "a[float64]", "c1", _verdict("a[float64]", "c1", "fail"))
    assert not old_table_covers(rows, "a[float32]", "c1", _verdict("a[float32]", "c1", "fail"))
    assert not old_table_covers(rows, "a[float64]", "c1", _verdict("a[float64]", "c1", "fail", detail="raised"))
    scoped = [dict(rows[0], properties=["test_y"])]
    assert not old_table_covers(scoped, "a[float64]", "c1", _verdict("a[float64]", "c1", "fail"))
