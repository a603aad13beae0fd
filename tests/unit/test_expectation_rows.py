"""The expectations table (impls/expectations.toml, protocol.expectations): its rows are validated as they are read
(a deviation of the catalogue with its parameters, a pattern only for a raised error), each record takes exactly the
rows of its name, a row naming what no longer exists is found before a run starts
(harness.pytest_plugin.stale_rows), and every record defined in impls/ is a built-in record (impls.records)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from harness.pytest_plugin.stale_rows import record_names, stale_rows
from impls import TABLE_PATH
from impls.records import BUILTIN_TARGETS, discover_records
from protocol.expectation_rows import Expectation, ExpectationError, parse_expectations
from protocol.expectations import ExpectationTableError, load_table, parse_table, rows_for
from protocol.registry import ImplLoadError, attention_impl, load_impl
from specs.catalogue import load_claims
from specs.deviations import deviation_from_fields

ROW = """
[[row]]
subject = ["rec-a", "rec-b"]
claim = ["sdpa-formula", "rows-sum-to-one"]
dtypes = ["float32"]
deviation = "rejects"
raises = "TypeError"
match = "argument 'scale' must be float"
why = "takes a Python float only"
reported = "here: a test"
"""
REJECTS = 'deviation = "rejects"\nraises = "TypeError"\nmatch = "argument \'scale\' must be float"\n'


def test_a_row_for_several_subjects_and_claims_is_one_row_each():
    rows = parse_table(ROW)
    assert {(r.subject, r.claim) for r in rows} == {(s, c) for s in ("rec-a", "rec-b")
                                                    for c in ("sdpa-formula", "rows-sum-to-one")}
    assert all(r.dtypes == ("float32",) and r.deviation.describe() == "rejects (match=\"argument 'scale' must be "
               "float\", raises='TypeError')" and r.reported == "here: a test" for r in rows)


@pytest.mark.parametrize("edit, message", [
    ((REJECTS, ""), "`deviation` is required"),
    (('deviation = "rejects"', 'deviation = "rejected"'), "no deviation named 'rejected'; the catalogue:"),
    (('raises = "TypeError"\n', ""), "rejects: `raises` names the exception's type"),
    (("match = \"argument 'scale' must be float\"", f"match = \"{'x' * 201}\""), "`match` has 201 characters"),
    (("match = \"argument 'scale' must be float\"", 'match = "(unclosed"'), "not a valid regex"),
    (('reported = "here: a test"\n', ""), "`reported` is required"),
    (('subject = ["rec-a", "rec-b"]\n', 'subject = []\n'), "`subject` must be a name or a non-empty list"),
    (('claim = ["sdpa-formula", "rows-sum-to-one"]\n', ""), "`claim` must be a name"),
    (('dtypes = ["float32"]', 'dtypes = ["float8"]'), "dtypes ['float8'] are not among"),
    (('why = "takes a Python float only"', 'why = "x"\nwhen = 1'), "unknown fields ['when']"),
    (('deviation = "rejects"', 'deviation = "keyless-row-mean"'), "a pattern on the failure message (`match`) "
                                                                   "declares only a raised error"),
    ((REJECTS, 'deviation = "keyless-row-mean"\nproperties = ["test_x"]\n'), "`properties` no longer scopes"),
    (("[[row]]", "[[row]"), "not valid TOML"),
])
def test_a_malformed_row_names_the_problem(edit, message):
    with pytest.raises(ExpectationTableError) as info:
        parse_table(ROW.replace(*edit))
    assert message in str(info.value)


def test_a_pattern_over_a_tolerance_failure_is_refused_with_the_deviation_form():
    """The old form, a regex over the failure message, for the built-in table and an implementation's own
    declarations alike: refused, the message showing the deviation form and the catalogue."""
    old = ROW.replace(REJECTS, 'match = "out differs from the float64 oracle beyond the tolerance"\n')
    with pytest.raises(ExpectationTableError) as info:
        parse_table(old)
    assert "name the deviation that explains the elements instead" in str(info.value)
    assert '"deviation": "<one of specs.deviations: keyless-row-mean' in str(info.value)
    with pytest.raises(ExpectationError, match="declares only a raised error"):
        parse_expectations({"sdpa-formula": {"why": "w", "dtypes": ("float64",), "match": "out differs"}},
                            ("float64",), "mine.py:fn")


def test_two_rows_of_one_key_are_rejected_but_two_deviations_of_one_cell_are_two_keys():
    other = ROW.replace('subject = ["rec-a", "rec-b"]', 'subject = "rec-b"')
    other = other.replace('"float32"', '"float32", "float16"')
    with pytest.raises(ExpectationTableError, match=r"row 2: \(rec-b, sdpa-formula, float32, rejects .*\) is already"):
        parse_table(ROW + other)
    assert len(parse_table(ROW + other.replace('"float32", ', ""))) == 6  # float16 alone is a key of its own
    second = other.replace(REJECTS, 'deviation = "float32-softmax"\n')
    assert len(parse_table(ROW + second)) == 6  # another deviation of the same cells


def test_an_outside_implementation_declares_a_deviation_or_its_own_prediction():
    rows = parse_expectations({"fully-masked-rows-zero": {"why": "finfo.min mask", "dtypes": ("float64",),
                                                           "deviation": "keyless-row-mean"}}, ("float64",), "t")
    assert rows[0].deviation.describe() == "keyless-row-mean"

    def mine(call):
        return {"out": (np.zeros(call.oracle.out.shape, bool), 0.0)}

    own = parse_expectations({"sdpa-formula": {"why": "w", "dtypes": "float64", "deviation": mine}}, ("float64",), "t")
    assert own[0].deviation.describe() == f"own:{mine.__qualname__}"
    with pytest.raises(ExpectationError, match="takes no parameter"):
        parse_expectations({"sdpa-formula": {"why": "w", "dtypes": "float64", "deviation": "float32-softmax",
                                              "through": ["keys"]}}, ("float64",), "t")


def test_a_record_takes_the_rows_of_its_name_only():
    impl = load_impl("impls.torch.torch_sdpa:sdpa_flash_cpu")
    mine = [row for row in load_table() if row.subject == "torch-sdpa-flash-cpu"]
    assert mine and list(impl.expectations) == mine
    assert load_impl("impls.numpy.numpy_tiled:tiled_attention").expectations == ()  # no row names it


@pytest.mark.parametrize("keyword", ["attention_expectations", "known_defects"])
def test_a_record_declaring_its_expectations_itself_is_sent_to_the_table(keyword):
    with pytest.raises(ValueError, match=r"rec: a record's expectations are its rows in impls/expectations.toml"):
        attention_impl(name="rec", backend="numpy", **{keyword: {"sdpa-formula": {}}})
    assert attention_impl(name="rec", backend="numpy")(lambda q, k, v: v).attention_name == "rec"


KEYLESS_MEAN = {"fully-masked-rows-zero": {"why": "w", "dtypes": ("float64",), "deviation": "keyless-row-mean"}}


def declared_the_former_way(q, k, v):
    return v


def declared_both_ways(q, k, v):
    return v


declared_the_former_way.known_defects = KEYLESS_MEAN
declared_both_ways.known_defects = declared_both_ways.attention_expectations = KEYLESS_MEAN


def test_the_deprecated_known_defects_is_still_read_with_a_warning():
    """fn.known_defects, the former name of fn.attention_expectations: read as before, with a DeprecationWarning
    naming the new one; both on one function is refused; Impl.known_defects reads Impl.expectations."""
    with pytest.warns(DeprecationWarning, match="name it fn.attention_expectations"):
        impl = load_impl(f"{__name__}:declared_the_former_way")
    assert [row.claim for row in impl.expectations] == ["fully-masked-rows-zero"]
    with pytest.warns(DeprecationWarning, match="read Impl.expectations"):
        assert impl.known_defects == impl.expectations
    with pytest.raises(ImplLoadError, match="declares both attention_expectations and known_defects"):
        load_impl(f"{__name__}:declared_both_ways")


def test_a_row_in_a_dtype_the_record_lacks_is_rejected():
    with pytest.raises(ExpectationError, match=r"names dtypes \['float16'\], which are not among the record's"):
        rows_for("torch-sdpa-math", ("float64", "float32", "bfloat16"))
    assert rows_for("torch-sdpa-math", ("float64", "float32", "float16", "bfloat16"))


def test_the_table_names_only_what_exists():
    """The shipped table (the tests' fixtures register their own rows beside it in the processes that import them)."""
    assert stale_rows(load_table(TABLE_PATH), load_claims(), record_names(BUILTIN_TARGETS)) == []


def test_rows_naming_what_no_longer_exists_are_listed():
    deviation = deviation_from_fields("float32-softmax", {}, "test")
    unknown_claim = Expectation("numpy-reference", "no-such-claim", "why", ("float16",), deviation)
    unknown_subject = Expectation("numpy-refrence", "sdpa-formula", "why", ("float16",), deviation)
    problems = stale_rows((unknown_claim, unknown_subject), load_claims(), record_names(BUILTIN_TARGETS))
    assert len(problems) == 2
    assert "the claim 'no-such-claim' is not in the catalogue" in problems[0]
    assert "no built-in record is named 'numpy-refrence'" in problems[1]
    assert stale_rows((unknown_subject,), load_claims(), None) == []  # subjects unknown: not checked


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
