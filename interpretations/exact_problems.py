"""Problems every transformation of the readings keeps exact (seed 002 § 3.1.2, seed 000 § 向量化): integer q, k
and v of head dim 16 whose rotated, translated, affinely mapped and normalised images are multiples of 1/8 below
2^5, exact in float64, float16 and bfloat16, in the first shape an implementation's capabilities admit."""

from __future__ import annotations

import pytest

from protocol.registry import Variant
from specs.problems import Problem, build
from specs.strategies import FIXED_SHAPES, Shape, ShapeRules

EXACT_D = 16


# Preferred shapes, first admitted by the implementation's capabilities: grouped kv heads, n_q != n_k and
# d_v != d where it takes them, lengths <= 11 so that one call costs little even for CUDA code run on the CPU.
EXACT_SHAPES = tuple(Shape(*sizes) for sizes in (
    (2, 1, 2, 7, 11, 16, 13), (2, 1, 2, 7, 11, 16, 16), (2, 1, 2, 11, 11, 16, 16),
    (2, 2, 1, 7, 11, 16, 13), (2, 2, 1, 7, 11, 16, 16), (2, 2, 1, 11, 11, 16, 16)))


def exact_problem(variant: Variant, *, seed: int, d: int = EXACT_D) -> Problem:
    """A fixed problem `variant` takes, with head dim 16 (d = 15 for a problem one coordinate will be added to):
    integer q, k in [-3, 3] and v in [-5, 5]. Every transformation the readings apply (a signed Hadamard rotation, keys
    translated by an integer vector, a V -> -1.5 V + b with integer b, unit vectors of +-1/4 entries, an
    integer log-prior) yields multiples of 1/8 below 2^5: exact in float64 and in float16 and bfloat16 (8
    significand bits). So the implementation receives the transformed problem exactly, the transformed
    oracle is exactly the transformation of the original, and only rounding inside the implementation is
    allowed for (specs.tolerance.metamorphic_allowance)."""
    rules = ShapeRules.for_caps(variant.capabilities, weights_visible=True)
    menu = map(rules.aligned, FIXED_SHAPES if rules.fixed else EXACT_SHAPES)
    shape = next((s for s in menu if s.d == EXACT_D and rules.admit(s)), None)
    if shape is None:
        pytest.skip(f"no problem of head dim {EXACT_D} fits {variant.name}'s capabilities")
    return build(**{**shape.fields(), "d": d}, seed=seed, score_style="integers", value_style="integers")
