"""report.html and report.md read as a document: the unexpected failures first, then the declared ones, readings
with their verdicts and pictures, claims grouped by seed and section under implementation names, failing cells
linked to bug reports that show the counterexample's weights."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from specs.readings import READINGS, SEED_TITLES
from tests.fixtures.runs import run_suite

pytest.importorskip("matplotlib", reason="the report's pictures are drawn with matplotlib")

IMPLS = ("tests/fixtures/outside_impls.py:einsum_attention", "tests/fixtures/report_impls.py:keys_reversed")


class _Document(HTMLParser):
    """Ids, links, images and the matrix's column headers of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids, self.links, self.images, self.headers = set(), [], [], []
        self._stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "table" and attrs.get("class") == "matrix":
            self._stack.append("matrix")
        if tag == "thead" and self._stack:
            self._stack.append("thead")
        if tag == "span" and self._stack[-1:] == ["thead"]:
            self._stack.append("header")

    def handle_endtag(self, tag):
        if (tag, self._stack[-1:]) in (("span", ["header"]), ("thead", ["thead"])):
            self._stack.pop()

    def handle_data(self, data):
        if self._stack[-1:] == ["header"]:
            self.headers.append(data)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("document")
    args = [a for target in IMPLS for a in ("--impl", target)]
    done = run_suite("properties/test_probability.py", "properties/test_formula.py", *args, report_dir=directory)
    assert done.report is not None, done.output[-3000:]
    document = _Document()
    document.feed((directory / "report.html").read_text())
    return done, directory, document


def test_implementations_head_the_columns(run):
    done, _, document = run
    assert document.headers == done.report["impls"]
    assert "1. 1:" not in (run[1] / "report.html").read_text()


def test_every_link_and_image_resolves(run):
    _, directory, document = run
    for link in document.links:
        assert link.startswith("#") and link[1:] in document.ids, link
    assert document.images
    for image in document.images:
        assert (directory / image).is_file(), image


def test_failing_cells_link_to_bug_reports_with_the_counterexample_weights(run):
    done, directory, document = run
    wrong = next(name for name in done.report["impls"] if "keys_reversed" in name)
    failing = [v for v in done.report["verdicts"] if v["impl"] == wrong and v["status"] == "fail"]
    assert any(v["claim"] == "sdpa-formula" for v in failing)
    bug_links = [link for link in document.links if link.startswith("#bug-")]
    assert len(set(bug_links)) == sum(v["status"] in ("fail", "error") for v in done.report["verdicts"])
    pictures = {(f["claims"][0], f["impl"]) for f in done.report["figures"]["drawn"]
                if f["source"] == "counterexample"}
    assert ("sdpa-formula", wrong) in pictures
    html = (directory / "report.html").read_text()
    assert re.search(r'<section class="bug" id="bug-\d+">.*?sdpa-formula.*?keys_reversed.*?<img src="figures/'
                     r'counterexample-sdpa-formula', html, re.S)


def test_both_documents_lead_with_the_unexpected_failures_then_the_declared_ones(run):
    """What needs a reader comes first: every unexpected failure's bug report, then every declared one's, then the
    readings and the grid."""
    done, directory, _ = run
    failed = [v for v in done.report["verdicts"] if v["status"] in ("fail", "error")]
    unexpected = sum(not v["declared"] for v in failed)
    assert unexpected and len(failed) > unexpected, "the run must show both kinds"
    markdown = (directory / "report.md").read_text()
    html = (directory / "report.html").read_text()
    for text, heads in ((markdown, ("## Unexpected failures", "## Declared failures", "## Readings", "## Claims grid")),
                        (html, ('<h2 id="unexpected">', '<h2 id="declared">', '<h2 id="readings">',
                                '<h2 id="matrix">'))):
        positions = [text.index(head) for head in heads]
        assert positions == sorted(positions), heads
        first = text[positions[0]:positions[1]]
        assert first.count("UNEXPECTED") == unexpected and "declared)" not in first
        assert text[positions[1]:positions[2]].count("declared)") == len(failed) - unexpected


def test_claims_are_grouped_by_seed_and_section_with_their_sentences(run):
    done, directory, _ = run
    html = (directory / "report.html").read_text()
    seeds = [SEED_TITLES[c["source"].partition(" § ")[0]] for c in done.report["claims"]
             if any(v["claim"] == c["slug"] for v in done.report["verdicts"])]
    positions = [html.index(title) for title in dict.fromkeys(seeds)]
    assert positions == sorted(positions)
    assert "<summary>seed sentence</summary>" in html and '<tr class="section">' in html


def test_every_reading_has_a_section_in_both_documents(run):
    _, directory, document = run
    markdown = (directory / "report.md").read_text()
    for reading in READINGS:
        assert f"reading-{reading.key}" in document.ids
        assert f"### {reading.title}" in markdown
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown):
        assert (directory / image).is_file(), image
    assert "figures/worked-examples.png" in markdown


def test_readings_name_catalogued_claims_once():
    from specs.catalogue import load_claims

    slugs = [slug for reading in READINGS for slug in reading.claims]
    assert set(slugs) <= set(load_claims()), set(slugs) - set(load_claims())
    assert len(slugs) == len(set(slugs))
    assert set(SEED_TITLES) >= {claim.seed for claim in load_claims().values()}


def test_the_page_renders_in_a_browser_with_every_picture(run):
    from harness.reporting.browser import BrowserUnavailable, check_in_browser

    _, directory, document = run
    try:
        result = check_in_browser(directory / "report.html", screenshot=directory / "report.png")
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
    assert result.problems() == []
    assert len(result.images) == len(document.images) and all(image.width > 0 for image in result.images)
    assert (directory / "report.png").stat().st_size > 10_000


def test_evidence_cells_merge_into_one_row_per_implementation():
    from harness.reporting.report_text import exhibit_tables

    def cells(impl, values, claims=("key-translation-invariance",)):
        return {"name": "invariances", "kind": "table", "caption": "c", "impl": impl, "claims": list(claims),
                "data": {"cells": values}}

    report = {"exhibits": [cells("a", {"translation": 0.012345}), cells("b", {"translation": 0.5}),
                           cells("a", {"rotation": 0.25}), cells("c", {"rotation": 1.0}, claims=("other",)),
                           {"name": "rows", "kind": "table", "caption": "r", "impl": "a", "claims": ["x"],
                            "data": {"columns": ["dtype", "gap"], "rows": [["float16", 17.38]]}}]}
    assert exhibit_tables(report, ["key-translation-invariance"]) == [
        ("c", ["implementation", "translation", "rotation"], [["a", "0.0123", "0.25"], ["b", "0.5", ""]])]
    assert exhibit_tables(report, ["x"]) == [("r", ["implementation", "dtype", "gap"], [["a", "float16", "17.4"]])]
