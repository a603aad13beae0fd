"""The differential-geometric reading (seed 002 § 3.1.4): its code as written (what it computes, the shapes
it runs on), and the true content of its "local coordinate systems" on every implementation: attention
depends on q and k only through the dot products q_i.k_j, so a change of basis applied to both (an
orthogonal R on each, or A on the queries with A^{-T} on the keys) changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from harness.api.trial import Trial
from interpretations.test_geometric import EXACT_D, exact_problem
from protocol.registry import Variant
from specs.problems import Problem, build
from specs.reference import attention
from specs.tolerance import difference_allowance, score_perturbation_allowance, unit_roundoff


def _torch():
    """torch, or a skip: only the seed's code needs it (the every-implementation properties do not)."""
    return pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")


def _run(q, k, v):
    torch = _torch()
    from impls.seeds.seed_code.seed002_readings import differential_geometric_attention

    return differential_geometric_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


def _explained(q, k, v):
    """softmax(Q Q^T) V and the allowance for the seed's Q U^T U Q^T scores, U the key's left singular
    vectors: |Q U^T U Q^T - Q Q^T| <= |Q| (|U^T U - I| + (2n + d + 4) u |U^T| |U|) |Q|^T."""
    torch = _torch()
    u_basis = torch.linalg.svd(torch.from_numpy(k), full_matrices=False)[0].numpy()
    n, d = k.shape
    defect = np.abs(u_basis.T @ u_basis - np.eye(u_basis.shape[1]))
    defect += (2 * n + d + 4) * unit_roundoff(np.float64) * (np.abs(u_basis.T) @ np.abs(u_basis))
    score_error = (np.abs(q) @ defect @ np.abs(q).T).max(axis=-1, keepdims=True)
    q4, v4 = q[None, None], v[None, None]
    allowance = score_perturbation_allowance(q4, q4, v4, score_error[None, None], scale=1.0)
    return attention(q4, q4, v4, scale=1.0).out[0, 0], allowance.take((0, 0))


@checks("differential-uses-key", subject="seed002-differential")
@given(n=st.integers(2, 16), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_output_depends_on_the_key(n, d, seed):
    """Self-attention shapes with d <= n (the only ones the code accepts)."""
    p = build(n_q=n, n_k=n, d=min(d, n), d_v=3, seed=seed)
    q, k, v = p.q[0, 0], p.k[0, 0], p.v[0, 0]
    other_k = -3.0 * k + 1.0
    out, out_other = _run(q, k, v), _run(q, other_k, v)
    explained, allowance = _explained(q, k, v)
    _, allowance_other = _explained(q, other_k, v)
    assert_within(out, explained, allowance, what="the code's out", versus="softmax(Q Q^T) V")
    assert np.any(np.abs(out - out_other) > difference_allowance(allowance, allowance_other).bound), (
        "replacing the key by -3 k + 1 changes the output by no more than rounding: "
        "coordinates @ coordinates^T = Q U^T U Q^T = Q Q^T, the key's basis cancels")


def expect_runs_on_attention_shapes(n_q: int, n_k: int, d: int, seed: int) -> None:
    """The code on (n_q, d) queries, (n_k, d) keys, (n_k, 3) values. It runs exactly when n_q = n_k and
    d <= n_k (U is n_k x min(n_k, d), so query @ U^T needs d = min(n_k, d); weights (n_q, n_q) @ value needs
    n_q = n_k); anything else is a different defect, reported as such."""
    p = build(n_q=n_q, n_k=n_k, d=d, d_v=3, seed=seed)
    runs_on_paper = n_q == n_k and d <= n_k
    try:
        out = _run(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    except RuntimeError as exc:
        assert not runs_on_paper, f"raised on n_q = n_k = {n_q}, d = {d} <= n_k, which it should run on: {exc}"
        raise AssertionError(
            f"differential_geometric_attention raises RuntimeError on n_q={n_q}, n_k={n_k}, d={d}: "
            "it runs only when n_q = n_k and d <= n_k (query @ U^T needs d = min(n_k, d); "
            f"the (n_q, n_q) weights @ value need n_q = n_k) ({str(exc).splitlines()[0]})") from None
    assert runs_on_paper and out.shape == (n_q, 3), (
        f"ran on n_q={n_q}, n_k={n_k}, d={d} and returned shape {out.shape}: the stated shape rule is wrong")


@checks("differential-code-shapes", subject="seed002-differential")
@given(n_q=st.integers(1, 8), n_k=st.integers(1, 8), d=st.integers(1, 10), seed=st.integers(0, 2**32 - 1))
def test_code_runs_on_every_attention_shape(n_q, n_k, d, seed):
    expect_runs_on_attention_shapes(n_q, n_k, d, seed)


# -- every implementation: one change of basis for queries and keys changes nothing ------------------------

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


BASIS_TABLE = ("basis-change-invariances", "Per implementation, the largest change of the output under a change of "
               "basis of q and k, relative to its allowance: below 1 passes.")


@checks("orthogonal-basis-change-invariance")
def test_rotating_queries_and_keys_together_changes_nothing(variant):
    ratio = expect_rotation_invariance(variant, exact_problem(variant, seed=103))
    record_headroom(BASIS_TABLE[0], "q, k -> R q, R k (R orthogonal)", ratio, BASIS_TABLE[1])


@checks("dual-basis-change-invariance")
def test_dual_change_of_basis_changes_nothing(variant):
    ratio = expect_dual_basis_invariance(variant, exact_problem(variant, seed=104))
    record_headroom(BASIS_TABLE[0], "q, k -> A q, A^-T k", ratio, BASIS_TABLE[1])
