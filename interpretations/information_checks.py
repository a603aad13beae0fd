"""The information-theoretic reading's checks (seed 002 § 3.1.3): keys as probability vectors (the only inputs KL
is defined for), one output row per query, and the mutual information I(i; J) of a weight matrix against the
largest any row-stochastic matrix reaches."""

from __future__ import annotations

import numpy as np

from specs.problems import build
from specs.tolerance import difference_allowance, entropy_allowance


def distributions(x: np.ndarray) -> np.ndarray:
    """Rows turned into probability vectors, the only inputs KL is defined for."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def expect_one_row_per_query(fn, n_q: int, n_k: int, d: int, seed: int) -> None:
    """fn(query, key, value) (torch, 2-D) on probability-vector keys must return n_q rows of d_v = 3."""
    import torch  # the seed's code takes torch tensors; the other checks here need none

    p = build(n_q=n_q, n_k=n_k, d=d, d_v=3, seed=seed)
    args = (p.q[0, 0], distributions(p.k[0, 0]), p.v[0, 0])
    out = fn(*(torch.from_numpy(x) for x in args)).numpy()
    assert out.shape == (n_q, 3), (
        f"returns {out.shape[0]} rows (one per key) for {n_q} queries: the weights are key-by-key, "
        f"softmax(-KL(k_i || k_j)) of shape ({n_k}, {n_k})")


def mutual_information(weights: np.ndarray) -> float:
    """I(i; J) for i uniform over the rows and J ~ weights[i]: H(mean row) - mean_i H(row i)."""
    def entropy(p):
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return float(entropy(weights.mean(axis=0)) - entropy(weights).mean())


def expect_largest_mutual_information(weights: np.ndarray, what: str) -> None:
    """I(i; J) of `weights` (n_q x n_k rows) is the largest over row-stochastic matrices: that of the most balanced
    one-hot assignment, within two float64 entropy allowances."""
    n_q, n_k = weights.shape
    largest = mutual_information(np.eye(n_k)[np.arange(n_q) % n_k])
    mi = mutual_information(weights)
    slack = difference_allowance(entropy_allowance(n_k), entropy_allowance(n_k))
    assert mi >= largest - slack.bound, (
        f"mutual information I(i; J) of {what} ({mi:.4g} nats, {n_q} queries x {n_k} keys) is below "
        f"{largest:.4g}, which one-hot rows on balanced distinct keys attain")
