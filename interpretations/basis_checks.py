"""One change of basis for queries and keys changes nothing (seed 002 § 3.1.4, the differential-geometric reading
in its correct form): q, k -> R q, R k for an orthogonal R, and q, k -> A q, A^-T k, on the variant's exact problem,
whose Hadamard rotations and stretches stay exact."""

from __future__ import annotations

from harness.api.trial import Trial
from interpretations.exact_problems import exact_problem
from protocol.registry import Variant
from specs.constructions import dual_basis_changed, hadamard_rotated
from specs.problems import Problem

SIGNS_AND_ORDER = 103


def rotated(problem: Problem, seed: int) -> Problem:
    """q_i -> R q_i and k_j -> R k_j for one orthogonal R (specs.constructions.hadamard_rotation: at EXACT_D its
    +-1/4 entries keep integer inputs exact)."""
    return problem.derive(hadamard_rotated, seed)


STRETCH = (2.0, 0.5)  # A = R D with D = diag(2, 1/2, 2, 1/2, ...): condition number 4, exact on integers


def dual_change_of_basis(problem: Problem, seed: int) -> Problem:
    """q_i -> A q_i and k_j -> A^{-T} k_j, A = R D: (A q).(A^{-T} k) = q^T D R^T R D^{-1} k = q.k."""
    return problem.derive(dual_basis_changed, seed, list(STRETCH))


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
