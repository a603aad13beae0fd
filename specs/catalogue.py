"""The claim catalogue (CONTRACT 2): every checkable sentence of the seeds, with a stable slug.

The data lives in specs/claims.toml; this module loads and validates it. Each
claim records its source (seed file and section), the original sentence, an
English statement, its kind, and whether the sentence holds as written: a
claim with `holds = false` is one the seed gets wrong, and its properties are
expected to fail on every subject, with the counterexample in the report.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CATALOGUE_PATH = Path(__file__).with_name("claims.toml")
KINDS = ("exact", "numerical", "statistical", "interpretive", "not-checkable")
SEED_FILES = (
    "000_7a81042443dec018.txt",
    "001_16e7e18349ffb2ee.txt",
    "002_5750249af0d98bb4.txt",
    "003_fea9ff623fe5f642.txt",
)
CONVENTION = "convention"  # source of the protocol's own rules (docs/design.md), not of a seed
# source of what the kernels people run document beyond the seeds (FlashAttention, SDPA, FlexAttention, gpt-oss);
# the section names the kernel and keyword, the original paraphrases its documented rule
BEYOND_THE_SEEDS = "beyond the seeds"


class CatalogueError(ValueError):
    """specs/claims.toml is malformed."""


@dataclass(frozen=True)
class Claim:
    slug: str
    seed: str  # a file of ../shared/seeds, "convention" or "beyond the seeds"
    section: str
    original: str  # the sentence (or code) as the source has it
    statement: str  # what the suite checks, in English
    kind: str
    holds: bool = True
    why: str = ""  # why it is not checkable, or why it does not hold as written
    note: str = ""
    also: tuple[str, ...] = ()  # other places the same claim is made
    refutation: str = ""  # holds = false: regex (re.search) every refuting failure's message must match

    @property
    def source(self) -> str:
        return f"{self.seed} § {self.section}"

    @property
    def checkable(self) -> bool:
        return self.kind != "not-checkable"


def _claim(entry: dict) -> Claim:
    fields = set(Claim.__dataclass_fields__)
    unknown = set(entry) - fields
    if unknown:
        raise CatalogueError(f"claim {entry.get('slug')!r}: unknown fields {sorted(unknown)}")
    try:
        claim = Claim(**{**entry, "also": tuple(entry.get("also", ()))})
    except TypeError as exc:
        raise CatalogueError(f"claim {entry.get('slug')!r}: {exc}") from None
    if claim.kind not in KINDS:
        raise CatalogueError(f"claim {claim.slug!r}: kind {claim.kind!r} is not one of {KINDS}")
    if claim.seed not in SEED_FILES + (CONVENTION, BEYOND_THE_SEEDS):
        raise CatalogueError(f"claim {claim.slug!r}: unknown source {claim.seed!r}")
    if (not claim.checkable or not claim.holds) and not claim.why:
        raise CatalogueError(f"claim {claim.slug!r}: a claim that is not checkable or does not hold needs `why`")
    if claim.checkable and not claim.holds:
        if not claim.refutation:
            raise CatalogueError(f"claim {claim.slug!r}: holds = false needs `refutation`, a regex naming the "
                                 "failure that refutes it (any other failure is unexpected)")
        try:
            re.compile(claim.refutation)
        except re.error as exc:
            raise CatalogueError(f"claim {claim.slug!r}: refutation is not a valid regex ({exc})") from None
    elif claim.refutation:
        raise CatalogueError(f"claim {claim.slug!r}: only a checkable claim with holds = false takes `refutation`")
    return claim


@cache
def load_claims(path: Path = CATALOGUE_PATH) -> dict[str, Claim]:
    """slug -> Claim, in catalogue order."""
    with open(path, "rb") as handle:
        entries = tomllib.load(handle).get("claim", [])
    claims: dict[str, Claim] = {}
    for entry in entries:
        claim = _claim(entry)
        if claim.slug in claims:
            raise CatalogueError(f"duplicate claim slug {claim.slug!r}")
        claims[claim.slug] = claim
    return claims


CORE_SLUGS = (
    "rows-sum-to-one",
    "permutation-equivariance",
    "sqrt-dk-variance",
    "causal-mask-zeroes-future",
    "tiled-equals-global",
)
