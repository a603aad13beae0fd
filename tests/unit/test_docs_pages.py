"""The documentation's generated pages (tools/docs_pages.py) are up to date, and the generator notices drift."""

from __future__ import annotations

import dataclasses

import pytest

from protocol.registry import Capabilities
from specs.catalogue import load_claims
from tools import docs_pages


def test_the_committed_generated_pages_are_up_to_date():
    assert docs_pages.stale() == [], "run `python -m tools.docs_pages` and commit docs/generated/"
    assert docs_pages.main(["--check"]) == 0


def test_an_edited_or_missing_page_is_stale(tmp_path):
    docs_pages.write(tmp_path)
    assert docs_pages.stale(tmp_path) == []
    edited = tmp_path / "capabilities.md"
    edited.write_text(edited.read_text().replace("| `gqa` |", "| `gqa_renamed` |"))
    (tmp_path / "claims.md").unlink()
    assert sorted(docs_pages.stale(tmp_path)) == ["capabilities.md", "claims.md"]


def test_the_capability_table_has_one_row_per_field_and_the_loaders_skip_reasons():
    rows = {row[0]: row for row in docs_pages.capability_rows()}
    assert list(rows) == [f.name for f in dataclasses.fields(Capabilities)]
    assert rows["dropout"][1] == "the signature: keyword `dropout_p`"
    assert rows["gqa"][1] == '`attention_capabilities["gqa"]`'
    assert rows["backward"][1] == "the attribute `fn.attention_backward`"
    assert rows["lse"][4] == Capabilities(lse=False).lacking("lse")
    assert rows["dtypes"][4] == ""  # not something a property requires


def test_a_capability_without_a_meaning_stops_the_generator():
    @dataclasses.dataclass(frozen=True)
    class Extended(Capabilities):
        sliding_window: bool = False

    with pytest.raises(docs_pages.DocsPageError, match=r"describe \['sliding_window'\]"):
        docs_pages.capability_rows(Extended)


def test_a_meaning_for_a_field_that_is_gone_stops_the_generator():
    @dataclasses.dataclass(frozen=True)
    class Fewer:
        scale: bool = False

    with pytest.raises(docs_pages.DocsPageError, match=r"drop \[.*'causal'"):
        docs_pages.capability_rows(Fewer)


def test_the_claims_page_has_every_claim_with_its_properties():
    page = docs_pages.claims_page()
    claims = load_claims()
    missing = [slug for slug in claims if f"### `{slug}`" not in page]
    assert not missing
    section = page.split("### `three-line-code-as-written`")[1].split("### ")[0]
    assert "**does not hold as written**" in section
    assert "NameError" in section  # its `why`
    formula = page.split("### `sdpa-formula`")[1].split("### ")[0]
    assert "**core**" not in formula and "`properties.test_formula::test_output_matches_oracle`" in formula
    assert "**core**" in page.split("### `rows-sum-to-one`")[1].split("### ")[0]


def test_bad_arguments_are_a_usage_error(capsys):
    assert docs_pages.main(["--write-everything"]) == 2
    assert "python -m tools.docs_pages" in capsys.readouterr().err
