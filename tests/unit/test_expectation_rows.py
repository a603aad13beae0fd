"""The expectations table (impls/expectations.toml, protocol.expectations): its rows are validated as they are read,
each record takes exactly the rows of its name, a row naming what no longer exists is found before a run
starts (harness.pytest_plugin.stale_rows), and every record defined in impls/ is a built-in record (impls.records)."""

from __future__ import annotations

import importlib
import pkgutil
import textwrap

import pytest

from harness.api.markers import PROPERTIES
from harness.pytest_plugin.stale_rows import (
    PROPERTY_PACKAGES,
    module_properties,
    record_names,
    stale_rows,
    suite_properties,
)
from impls.records import BUILTIN_TARGETS, discover_records
from protocol.expectations import ExpectationTableError, load_table, parse_table, rows_for
from protocol.known_defects import DefectDeclarationError, Row
from protocol.registry import attention_impl, load_impl
from specs.catalogue import load_claims

ROW = """
[[row]]
subject = ["rec-a", "rec-b"]
claim = ["sdpa-formula", "rows-sum-to-one"]
dtypes = ["float32"]
match = '''^returned nan at out'''
why = "reads unwritten memory"
reported = "here: a test"
"""


def test_a_row_for_several_subjects_and_claims_is_one_row_each():
    rows = parse_table(ROW)
    assert {(r.subject, r.claim) for r in rows} == {(s, c) for s in ("rec-a", "rec-b")
                                                    for c in ("sdpa-formula", "rows-sum-to-one")}
    assert all(r.dtypes == ("float32",) and r.match == "^returned nan at out" and r.reported == "here: a test"
               and not r.properties for r in rows)


@pytest.mark.parametrize("edit, message", [
    (("match = '''^returned nan at out'''\n", ""), "a row of the table names its symptom: `match`"),
    (('reported = "here: a test"\n', ""), "`reported` is required"),
    (('subject = ["rec-a", "rec-b"]\n', 'subject = []\n'), "`subject` must be a name or a non-empty list"),
    (('claim = ["sdpa-formula", "rows-sum-to-one"]\n', ""), "`claim` must be a name"),
    (('dtypes = ["float32"]', 'dtypes = ["float8"]'), "dtypes ['float8'] are not among"),
    (("match = '''^returned nan at out'''", "match = '''(unclosed'''"), "not a valid regex"),
    (('why = "reads unwritten memory"', 'why = "x"\nwhen = 1'), "unknown fields ['when']"),
    (("[[row]]", "[[row]"), "not valid TOML"),
])
def test_a_malformed_row_names_the_problem(edit, message):
    with pytest.raises(ExpectationTableError) as info:
        parse_table(ROW.replace(*edit))
    assert message in str(info.value)


def test_two_rows_of_one_subject_claim_and_dtype_are_rejected():
    other = ROW.replace('subject = ["rec-a", "rec-b"]', 'subject = "rec-b"')
    other = other.replace('"float32"', '"float32", "float16"')
    with pytest.raises(ExpectationTableError, match=r"row 2: \(rec-b, sdpa-formula, float32\) is already a key of"):
        parse_table(ROW + other)
    assert len(parse_table(ROW + other.replace('"float32", ', ""))) == 6  # float16 alone is a key of its own


def test_a_record_takes_the_rows_of_its_name_only():
    impl = load_impl("impls.torch.torch_sdpa:sdpa_flash_cpu")
    mine = [row for row in load_table() if row.subject == "torch-sdpa-flash-cpu"]
    assert mine and list(impl.known_defects) == mine
    assert load_impl("impls.numpy.numpy_tiled:tiled_attention").known_defects == ()  # no row names it


def test_a_record_declaring_known_defects_itself_is_sent_to_the_table():
    with pytest.raises(ValueError, match=r"rec: a record's known defects are its rows in impls/expectations.toml"):
        attention_impl(name="rec", backend="numpy", known_defects={"sdpa-formula": {}})
    assert attention_impl(name="rec", backend="numpy")(lambda q, k, v: v).attention_name == "rec"


def test_a_row_in_a_dtype_the_record_lacks_is_rejected():
    with pytest.raises(DefectDeclarationError, match=r"names dtypes \['float16'\], which are not among the record's"):
        rows_for("torch-sdpa-math", ("float64", "float32", "bfloat16"))
    assert rows_for("torch-sdpa-math", ("float64", "float32", "float16", "bfloat16"))


def test_the_table_names_only_what_exists():
    assert stale_rows(load_table(), load_claims(), suite_properties(), record_names(BUILTIN_TARGETS)) == []


def test_rows_naming_what_no_longer_exists_are_listed():
    properties = suite_properties()
    renamed = Row("numpy-reference", "online-softmax-avoids-overflow", "why", ("float16",),
                  ("test_scores_past_the_range_renamed",), "nan")
    unknown_claim = Row("numpy-reference", "no-such-claim", "why", ("float16",), (), "nan")
    unknown_subject = Row("numpy-refrence", "sdpa-formula", "why", ("float16",), (), "nan")
    names = record_names(BUILTIN_TARGETS)
    problems = stale_rows((renamed, unknown_claim, unknown_subject), load_claims(), properties, names)
    assert len(problems) == 3
    assert "names properties ['test_scores_past_the_range_renamed'], which 'online-softmax-avoids-overflow' no " \
           "longer has" in problems[0]
    assert "the claim 'no-such-claim' is not in the catalogue" in problems[1]
    assert "no built-in record is named 'numpy-refrence'" in problems[2]
    assert stale_rows((unknown_subject,), load_claims(), properties, None) == []  # subjects unknown: not checked


def test_properties_read_from_the_source_are_the_ones_the_modules_register():
    for package in PROPERTY_PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if module.name.startswith("test_"):
                importlib.import_module(f"{package}.{module.name}")
    registered = {slug: {name.rpartition("::")[2] for name in names} for slug, names in PROPERTIES.items()}
    assert suite_properties() == registered


def test_a_property_module_is_read_for_literal_and_constant_slugs():
    source = textwrap.dedent("""
        CLAIM = "rows-sum-to-one"

        @checks("sdpa-formula", CLAIM, subject="oracle")
        @given(data=st.data())
        def test_a(variant, data): ...

        @pytest.mark.slow
        def test_not_a_property(): ...
    """)
    assert module_properties(source, "m.py") == {"sdpa-formula": {"test_a"}, "rows-sum-to-one": {"test_a"}}
    with pytest.raises(ValueError, match=r"m.py:2: @checks takes claim slugs as string literals .* got SLUGS\[0\]"):
        module_properties("@checks(SLUGS[0])\ndef test_b(variant): ...\n", "m.py")


def test_record_names_are_unknown_when_a_record_cannot_be_imported():
    assert record_names(("impls.numpy.numpy_tiled:tiled_attention",)) == {"numpy-tiled"}
    assert record_names(("impls.numpy.numpy_tiled:tiled_attention", "no_such_backend_module:fn")) is None


def test_every_record_defined_in_impls_is_a_builtin_record():
    assert sorted(BUILTIN_TARGETS) == discover_records("impls")


def test_a_record_missing_from_the_list_is_found(tmp_path, monkeypatch):
    package = tmp_path / "extra_records"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "faces.py").write_text(textwrap.dedent("""
        from protocol.registry import attention_impl
        from impls.numpy.numpy_tiled import tiled_attention  # imported, not defined here

        @attention_impl(name="extra", backend="numpy")
        def extra(q, k, v):
            return v
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert discover_records("extra_records") == ["extra_records.faces:extra"]
