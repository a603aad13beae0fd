"""The expectations table's sections (protocol.expectations.SECTIONS): the built-in records' `[[row]]`s and the
tests' implementations' `[[fixture]]`s, read apart, one key rule across them; any implementation takes the rows of
its name; the fixtures' rows name only claims, properties and subjects that exist."""

from __future__ import annotations

import textwrap

import pytest

from harness.pytest_plugin.stale_rows import stale_rows, suite_properties
from protocol import expectations
from protocol.expectations import ExpectationTableError, load_table, parse_sections, parse_table, register_table
from protocol.registry import load_impl
from specs.catalogue import load_claims
from tests.fixtures.expectation_groups import GROUPS
from zoo.defects import DEFECTS

TABLE = """
[[row]]
subject = "rec-a"
claim = "sdpa-formula"
dtypes = ["float64"]
match = '''^returned nan at out'''
why = "a record's"
reported = "here: a test"

[[fixture]]
subject = "wrong-something"
claim = "rows-sum-to-one"
dtypes = ["float64"]
match = '''do not sum to 1'''
why = "a test implementation's"
reported = "here: a test"
"""


def test_each_section_is_read_apart():
    sections = parse_sections(TABLE)
    assert [(s, [r.why for r in rows]) for s, rows in sections.items()] == [
        ("row", ["a record's"]), ("fixture", ["a test implementation's"])]
    assert parse_table(TABLE) == sections["row"]  # the built-in records' rows: what a run checks at its start
    assert parse_table(TABLE, section="fixture") == sections["fixture"]


def test_an_unknown_section_is_rejected():
    with pytest.raises(ExpectationTableError, match=r"unknown sections \['rows'\]; a table holds \['row', 'fixture'\]"):
        parse_sections(TABLE.replace("[[fixture]]", "[[rows]]"))
    with pytest.raises(ExpectationTableError, match="no section 'zoos'"):
        parse_table(TABLE, section="zoos")


def test_a_key_is_one_row_across_sections():
    twice = TABLE.replace('subject = "wrong-something"\nclaim = "rows-sum-to-one"', 'subject = "rec-a"\n'
                          'claim = "sdpa-formula"')
    with pytest.raises(ExpectationTableError, match=r"fixture 1: \(rec-a, sdpa-formula, float64\) is already a key "
                                                    r"of .*row 1"):
        parse_sections(twice)


def test_a_plain_function_takes_the_rows_of_its_target(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        def wrong(q, k, v):
            return v

        def other(q, k, v):
            return v
    """))
    target = f"{tmp_path / 'mine.py'}:wrong"
    table = tmp_path / "table.toml"
    table.write_text(TABLE.replace('"wrong-something"', repr(target)))
    monkeypatch.setattr(expectations, "_TABLES", [])
    register_table(table)
    (row,) = load_impl(target).known_defects
    assert (row.subject, row.why) == (target, "a test implementation's")
    assert load_impl(f"{tmp_path / 'mine.py'}:other").known_defects == ()


def _names(targets) -> set[str]:
    try:
        return {load_impl(target).name for target in targets}
    except ImportError as exc:
        pytest.skip(f"{exc.name} is not installed")


def test_the_fixture_rows_name_only_what_exists():
    rows = load_table(section="fixture")
    assert rows, "the table has no [[fixture]] rows"
    targets = [target for group in GROUPS.values() for target in group.targets] + [d.target for d in DEFECTS]
    problems = stale_rows(rows, load_claims(), suite_properties(), _names(targets))
    assert problems == [], problems


def test_every_wrong_implementation_of_the_zoo_has_rows():
    """The zoo's list is its rows of the table (zoo/defects.py): a wrong implementation without rows would never
    run, so every public function of zoo/wrong.py and zoo/wrong_faces.py, and the six of zoo/declared.py, must have
    some."""
    from zoo import declared, wrong, wrong_faces

    functions = [f"zoo/{module.__name__.rpartition('.')[2]}.py:{name}" for module in (wrong, wrong_faces)
                 for name, value in vars(module).items()
                 if callable(value) and not name.startswith("_") and value.__module__ == module.__name__]
    functions += [f"zoo/declared.py:{name}" for name in declared.DEFECTIVE]
    assert sorted(d.target for d in DEFECTS) == sorted(functions)
    assert all(d.mistake and d.source and d.breaks for d in DEFECTS)
