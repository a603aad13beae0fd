"""Seed 002's reading code as written, run on NumPy inputs, and the shapes it must take: the Bayesian reading's
(§ 3.1.5: n_q queries against n_k keys) and the differential-geometric reading's (§ 3.1.4: the shapes it runs
on, and the reason it fails off them)."""

from __future__ import annotations

import pytest

from specs.problems import build


def seed_code_torch():
    """torch, or a skip: only the seed's code needs it (the every-implementation properties do not)."""
    return pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")


def run_bayesian_code(q, k, v):
    torch = seed_code_torch()
    from impls.seeds.seed_code.seed002_readings import bayesian_attention

    return bayesian_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


def expect_takes_cross_attention(n_q: int, n_k: int, d: int, seed: int) -> None:
    p = build(n_q=n_q, n_k=n_k, d=d, d_v=3, seed=seed)
    try:
        out = run_bayesian_code(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    except RuntimeError as exc:
        raise AssertionError(
            f"bayesian_attention on n_q={n_q} queries and n_k={n_k} keys raises RuntimeError: the likelihood "
            "is (n_k, n_k), one row per value, multiplied with the (n_q, n_k) prior row by row, so query i is "
            f"paired with value i ({str(exc).splitlines()[0]})") from None
    assert out.shape == (n_q, 3), (
        f"bayesian_attention on n_q={n_q} queries and n_k={n_k} keys returns {out.shape[0]} rows: the (1, n_k) "
        "prior broadcasts against the (n_k, n_k) likelihood, one posterior per value instead of per query")


def run_differential_code(q, k, v):
    torch = seed_code_torch()
    from impls.seeds.seed_code.seed002_readings import differential_geometric_attention

    return differential_geometric_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


def expect_runs_on_attention_shapes(n_q: int, n_k: int, d: int, seed: int) -> None:
    """The code on (n_q, d) queries, (n_k, d) keys, (n_k, 3) values. It runs exactly when n_q = n_k and
    d <= n_k (U is n_k x min(n_k, d), so query @ U^T needs d = min(n_k, d); weights (n_q, n_q) @ value needs
    n_q = n_k); anything else is a different defect, reported as such."""
    p = build(n_q=n_q, n_k=n_k, d=d, d_v=3, seed=seed)
    runs_on_paper = n_q == n_k and d <= n_k
    try:
        out = run_differential_code(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    except RuntimeError as exc:
        assert not runs_on_paper, f"raised on n_q = n_k = {n_q}, d = {d} <= n_k, which it should run on: {exc}"
        raise AssertionError(
            f"differential_geometric_attention raises RuntimeError on n_q={n_q}, n_k={n_k}, d={d}: "
            "it runs only when n_q = n_k and d <= n_k (query @ U^T needs d = min(n_k, d); "
            f"the (n_q, n_q) weights @ value need n_q = n_k) ({str(exc).splitlines()[0]})") from None
    assert runs_on_paper and out.shape == (n_q, 3), (
        f"ran on n_q={n_q}, n_k={n_k}, d={d} and returned shape {out.shape}: the stated shape rule is wrong")
