"""The claim catalogue: complete, consistent with the properties, and faithful to the seeds."""

from __future__ import annotations

import importlib
import re

import pytest

from harness.api.markers import PROPERTIES
from specs.catalogue import CORE_SLUGS, KINDS, SEED_FILES, CatalogueError, _claim, load_claims
from tests.fixtures.runs import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"
PROPERTY_MODULES = sorted(p for d in ("properties", "interpretations") for p in (ROOT / d).glob("test_*.py"))


@pytest.fixture(scope="module")
def registered() -> dict[str, list[str]]:
    for path in PROPERTY_MODULES:
        importlib.import_module(f"{path.parent.name}.{path.stem}")
    return PROPERTIES


def test_more_than_forty_claims_with_the_core_five():
    claims = load_claims()
    assert len(claims) > 40
    assert set(CORE_SLUGS) <= set(claims)
    assert {c.kind for c in claims.values()} <= set(KINDS)


def test_every_checkable_claim_has_a_property(registered):
    unchecked = [slug for slug, claim in load_claims().items() if claim.checkable and not registered.get(slug)]
    assert unchecked == []


def test_not_checkable_claims_say_why_and_have_no_property(registered):
    for slug, claim in load_claims().items():
        if not claim.checkable:
            assert claim.why and not registered.get(slug), slug


def test_every_property_checks_a_catalogued_claim(registered):
    assert set(registered) - set(load_claims()) == set()


def test_every_seed_file_is_cited():
    assert {c.seed for c in load_claims().values()} >= set(SEED_FILES)


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the seed documents are not at {SEEDS}")
def test_original_sentences_are_quoted_from_their_seed():
    """Each fragment of an original (between '...' elisions, ' / ' and the '; ' that joins code lines)
    occurs in the cited seed file, whitespace aside."""
    texts = {name: _normalise((SEEDS / name).read_text(encoding="utf-8")) for name in SEED_FILES}
    for claim in load_claims().values():
        if claim.seed not in texts:
            continue
        for fragment in re.split(r"\s*(?:\.\.\.|/|; )\s*", claim.original):
            fragment = _normalise(fragment)
            if len(fragment) >= 6:
                assert fragment in texts[claim.seed], f"{claim.slug}: {fragment!r} not in {claim.seed}"


def _normalise(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("$\\times$", "×").replace("\\times", "×").replace("$", ""))


def test_malformed_entries_are_named():
    with pytest.raises(CatalogueError, match="unknown fields"):
        _claim({"slug": "x", "seed": SEED_FILES[0], "section": "s", "original": "o", "statement": "s",
                "kind": "exact", "colour": "red"})
    with pytest.raises(CatalogueError, match="kind 'vague'"):
        _claim({"slug": "x", "seed": SEED_FILES[0], "section": "s", "original": "o", "statement": "s",
                "kind": "vague"})
    with pytest.raises(CatalogueError, match="needs `why`"):
        _claim({"slug": "x", "seed": SEED_FILES[0], "section": "s", "original": "o", "statement": "s",
                "kind": "exact", "holds": False})

