"""The deviations accept mode tries on a failing example nothing declared explains, narrowest first: a raised error
becomes `raises-on-empty-ring-block` with its type (explained only where the call's ring has an empty block), else
`rejects` with its type and the start of its text, a checker's report `checker-reports`, an accepted bad
input each documented reading, a measurement of resident memory `keeps-score-matrix`; any other failure each
parameter setting of the catalogue's deviations that need no parameter from the failure."""

from __future__ import annotations

import re

from harness.api.evidence import PropertyViolation
from specs.deviations import CATALOGUE, Deviation
from specs.deviations.errors import ACCEPTS_READS, CheckerReports
from specs.deviations.ignored import IGNORABLE

# kernels' key tiles, the kernel run once on all the keys or once per block of a ring
KEY_TILES = (*({"block_n": size} for size in (16, 32, 64, 128)),
             *({"block_n": size, "ring_steps": True} for size in (16, 32, 64, 128)))
# the parameter settings tried for deviations whose parameters the failure does not give
SETTINGS: dict[str, tuple[dict, ...]] = {
    "keyless-row-mean": ({"masked_scores": "added"}, {"masked_scores": "replaced"}),
    "hidden-nonfinite-reaches-rows": tuple({"through": through, "across": across}
                                           for through in (["values"], ["keys"], ["values", "keys"])
                                           for across in ("sequence", "pack")),
    "keyless-lse-finite": ({"fill": -0.7 * 3.4028234663852886e38},),
    "projections-spread-nonfinite": ({"then": []}, {"then": ["values", "keys"]}),
    "hidden-nonfinite-reaches-gradients": ({"gradients": ["dq"]}, {"gradients": ["dq", "dk"]},
                                           {"gradients": ["dq", "dv"]}, {"gradients": ["dq", "dk", "dv"]}),
    "ignores-keyword": tuple({"keyword": keyword} for keyword in IGNORABLE),
    "padded-keys-weight-overflow": KEY_TILES,
    "padded-keys-nan-at-nonpositive-scale": KEY_TILES,
    "merge-rounds-at-partial-size": tuple({"merges": ranks} for ranks in (2, 3, 4)),  # the sharded groups' sizes
}
NEEDS_THE_FAILURE = ("rejects", "raises-on-empty-ring-block", "backward-fails-on-one-rank", "accepts",
                     "checker-reports", "keeps-score-matrix", "key-blocks-normalised-alone",
                     "unwritten-shared-memory-read")
RAISED = re.compile(r"^the implementation raised (\w+): (.*)")
REPORTED = re.compile(r"^(memcheck|racecheck|synccheck) reports a defect in [^:]*: (.*)")
WORDS = 8  # of an error's text, in the pattern accept mode writes


def _pattern(text: str) -> str:
    """A regex of the first words of `text` (a word holding a digit, an address or a count, stands for any),
    under 200 characters."""
    words = [r"\S+" if re.search(r"\d", word) else re.escape(word) for word in text.splitlines()[0].split()[:WORDS]]
    while words and words[0] == r"\S+":
        words.pop(0)
    return r"\s+".join(words)[:160]


def candidates(failure: PropertyViolation) -> list[Deviation]:
    """What accept mode tries for `failure`, narrowest first."""
    raised = RAISED.match(failure.summary)
    if raised:  # a modelled condition before a pattern of the text
        return [CATALOGUE["raises-on-empty-ring-block"](raises=raised.group(1)),
                CATALOGUE["backward-fails-on-one-rank"](),
                CATALOGUE["rejects"](raises=raised.group(1), match=_pattern(raised.group(2)))]
    reported = REPORTED.match(failure.summary)
    if reported:
        return [CheckerReports(checker=reported.group(1), match=_pattern(reported.group(2)))]
    if failure.summary.startswith("accepted "):
        return [CATALOGUE["accepts"](reads=reads) for reads in ACCEPTS_READS]
    if failure.summary.startswith("peak resident memory"):
        return [CATALOGUE["keeps-score-matrix"]()]
    found = []
    for name, cls in CATALOGUE.items():
        if name in NEEDS_THE_FAILURE:
            continue
        for params in SETTINGS.get(name, ({},)):
            found.append(cls(**params))
    return found
