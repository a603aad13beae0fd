"""The one comparison every property makes: |got - expected| <= allowance, element by element.

`compare` measures and `assert_within` asserts; both name the worst element when
the comparison fails, so an oracle-only check, a seed-code check and an
implementation's property all fail with the same kind of message (as
array-api-tests' assertion helpers do for their own checks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from harness.api.evidence import PropertyViolation
from specs.tolerance import Allowance


@dataclass(frozen=True)
class Comparison:
    """How `got` compared with `expected`: the largest error / allowed, and the failure's lines (none: within)."""

    ratio: float  # largest |error| / allowed over elements within the allowance; inf if a bad element is NaN/Inf
    details: tuple[str, ...]

    @property
    def within(self) -> bool:
        return not self.details


def _element(what: str, position: tuple[int, ...]) -> str:
    return f"{what}[{', '.join(map(str, position))}]" if position else what


def allowance_line(allowance: Allowance, position: tuple[int, ...], shape: tuple[int, ...], *,
                   what: str = "out") -> str:
    """The allowance at one element, term by term, naming the largest: 'allowed 3.1e-03 at out[0, 1] =
    2 x naive float16 error 3.1e-03 (dominant), output rounding 4.9e-04'; a one-term allowance by its rule."""
    allowed = float(np.broadcast_to(allowance.bound, shape)[position])
    head = f"allowed {allowed:.3g} at {_element(what, position)}"
    if not allowance.terms:
        return f"{head}: {allowance.rule}"
    terms = allowance.at(position, shape)
    dominant = max(range(len(terms)), key=lambda i: terms[i][1])
    return f"{head} = " + ", ".join(f"{name} {value:.3g}" + (" (dominant)" if i == dominant else "")
                                    for i, (name, value) in enumerate(terms))


def compare(got: np.ndarray, expected: np.ndarray, allowance: Allowance, *, what: str = "out") -> Comparison:
    """Compare element by element; NaN or Inf in the error counts as over the allowance."""
    if not isinstance(allowance, Allowance):
        raise TypeError(f"allowance must be a specs.tolerance.Allowance, not {type(allowance).__name__}")
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        raise ValueError(f"{what}: got has shape {got.shape}, expected has shape {expected.shape}")
    try:
        bound = np.broadcast_to(np.asarray(allowance.bound, dtype=np.float64), expected.shape)
    except ValueError:
        raise ValueError(f"{what}: allowance of shape {np.shape(allowance.bound)} does not broadcast to "
                         f"{expected.shape}") from None
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(got - expected)
        bad = ~(error <= bound)  # NaN and Inf count as bad
        badness = np.where(np.isfinite(error), error / np.maximum(bound, np.finfo(float).tiny), np.inf)
    if not bad.any():
        return Comparison(float(badness.max(initial=0.0)), ())
    worst = np.unravel_index(int(np.argmax(np.where(bad, badness, -1.0))), bad.shape)
    nan = int(np.isnan(got).sum())
    details = (
        f"worst element {_element(what, worst)}: got {float(got[worst])!r}, expected {float(expected[worst])!r}, "
        f"|error| {error[worst]:.3g} > allowed {bound[worst]:.3g}",
        f"elements over tolerance: {int(bad.sum())} of {bad.size}" + (f" ({nan} NaN)" if nan else ""),
        allowance_line(allowance, worst, expected.shape, what=what),
    )
    return Comparison(float(badness[worst]), details)


def names(text: str, keyword: str) -> bool:
    """Whether an error's `text` names `keyword` as a word of its own: not inside a longer name (bias inside
    alibi_bias, scale inside rescale), though a keyword of a family (cu_seqlens) may head one of its members
    (cu_seqlens_k)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(keyword)}(?![A-Za-z0-9])", text) is not None


def assert_within(got: np.ndarray, expected: np.ndarray, allowance: Allowance, *, what: str = "out",
                  versus: str = "the float64 oracle", claim: str | None = None) -> float:
    """Raise a PropertyViolation naming the worst element unless |got - expected| <= allowance everywhere;
    return the largest error / allowed. `claim` names the claim when a test checks several."""
    __tracebackhide__ = True
    comparison = compare(got, expected, allowance, what=what)
    if not comparison.within:
        raise PropertyViolation(f"{what} differs from {versus} beyond the tolerance", details=comparison.details,
                                claim=claim)
    return comparison.ratio
