"""One change of basis for queries and keys changes nothing (seed 002 § 3.1.4, the differential-geometric reading
in its correct form): q, k -> R q, R k for an orthogonal R, and q, k -> A q, A^-T k, on the variant's exact problem,
whose Hadamard rotations and stretches stay exact."""

from __future__ import annotations

import numpy as np

from harness.api.trial import Trial
from interpretations.exact_problems import EXACT_D, exact_problem
from protocol.registry import Variant
from specs.problems import Problem

SIGNS_AND_ORDER = 103


def hadamard_step(seed: int) -> str:
    """Python that binds `r`: rows of the 16 x 16 Sylvester Hadamard matrix / 4, permuted and sign-flipped by
    a fixed seed. r r^T = I, and its +-1/4 entries keep integer inputs exact (multiples of 1/4)."""
    rng = np.random.default_rng(seed)
    order, signs = rng.permutation(EXACT_D).tolist(), rng.choice([-1.0, 1.0], EXACT_D).tolist()
    return (f"h = np.array([[(-1.0) ** bin(i & j).count('1') for j in range({EXACT_D})] for i in range({EXACT_D})])"
            f" / 4; r = h[{order}] * np.array({signs})[:, None]")


def rotated(problem: Problem, seed: int) -> Problem:
    """q_i -> R q_i and k_j -> R k_j for one orthogonal R (rows: x -> x R^T)."""
    return problem.derive(f"{hadamard_step(seed)}; p = p.replace(q=p.q @ r.T, k=p.k @ r.T)")


STRETCH = (2.0, 0.5)  # A = R D with D = diag(2, 1/2, 2, 1/2, ...): condition number 4, exact on integers


def dual_change_of_basis(problem: Problem, seed: int) -> Problem:
    """q_i -> A q_i and k_j -> A^{-T} k_j, A = R D: (A q).(A^{-T} k) = q^T D R^T R D^{-1} k = q.k."""
    stretch = f"np.tile({list(STRETCH)}, {EXACT_D // 2})"
    return problem.derive(f"{hadamard_step(seed)}; dd = {stretch}; "
                          "p = p.replace(q=(p.q * dd) @ r.T, k=(p.k / dd) @ r.T)")


def expect_rotation_invariance(variant: Variant, problem: Problem) -> float:
    return Trial(variant, problem).expect_unchanged(rotated(problem, SIGNS_AND_ORDER), what="out(R q, R k)",
                                                    versus="out(q, k) (R orthogonal: (R q).(R k) = q.k)")


def expect_dual_basis_invariance(variant: Variant, problem: Problem) -> float:
    return Trial(variant, problem).expect_unchanged(dual_change_of_basis(problem, SIGNS_AND_ORDER),
                                                    what="out(A q, A^-T k)",
                                                    versus="out(q, k) ((A q).(A^-T k) = q.k)")


def check_rotation(variant: Variant) -> float:
    """orthogonal-basis-change-invariance on the variant's exact problem: the largest change / allowed."""
    return expect_rotation_invariance(variant, exact_problem(variant, seed=SIGNS_AND_ORDER))


def check_dual_basis(variant: Variant) -> float:
    """dual-basis-change-invariance on the variant's exact problem: the largest change / allowed."""
    return expect_dual_basis_invariance(variant, exact_problem(variant, seed=104))
