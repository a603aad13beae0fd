"""Problems built for one reading or witness: exact scores, cosines, rotations, priors and positions (each a
@problem_step on a built problem, so its repro prints the call; specs.derivations holds the general steps).
"""

from __future__ import annotations

import numpy as np

from specs.positional import rotary_embedding, sinusoidal_encoding
from specs.problems import Problem, problem_step


# -- exact scores (seed 002's probabilistic reading) --------------------------------------------------------------
@problem_step
def integer_scored(p: Problem, seed: int) -> Problem:
    """Scores c_ij in {0, 1, 2, 3} (seeded), row 0 all 2 (a full tie), for n x n scores in head dim n + 4: one-hot
    keys e_j and q_i = c_i padded with zeros, so q.k_j = c_ij exactly."""
    n, d = p.n_q, p.q.shape[-1]
    c = np.random.default_rng(seed).integers(0, 4, (n, n)).astype(float)
    c[0] = 2.0
    return p.replace(q=np.pad(c, ((0, 0), (0, d - n)))[None, None], k=np.eye(n, d)[None, None])


@problem_step
def residue_masked(p: Problem) -> Problem:
    """A mask hiding key j from query i when (i + 2 j) % 3 == 0."""
    return p.replace(mask=((np.arange(p.n_q)[:, None] + 2 * np.arange(p.n_k)) % 3 != 0)[None, None])


@problem_step
def ladder_of_gaps(p: Problem, lowest: float, highest: float) -> Problem:
    """On 16 x 16 one-hot keys: row i scores key 0 at 0 and keys 1..15 at -g for 15 consecutive gaps g of a
    240-step ladder, 120 steps from 0.5 up to `lowest`, 120 from `lowest` to 1.1 x `highest` (q = -4 g undoes the
    default scale 1/4)."""
    gaps = np.concatenate([np.linspace(0.5, lowest, 120, endpoint=False),
                           np.linspace(lowest, 1.1 * highest, 120)]).reshape(16, 15)
    q = np.zeros((1, 1, 16, 16))
    q[0, 0, :, 1:] = -4.0 * gaps
    return p.replace(q=q, k=np.eye(16)[None, None])


@problem_step
def prior_appended(p: Problem, logs: list, query_entry: float) -> Problem:
    """q'_i = [q_i, query_entry], k'_j = [k_j, log pi_j]: with query_entry 1/s' for the scale s' applied to the
    longer head, s' q'_i.k'_j = s' q_i.k_j + log pi_j, an additive log-prior bias on every score."""
    return p.replace(q=np.concatenate([p.q, np.full(p.q.shape[:-1] + (1,), query_entry)], axis=-1),
                     k=np.concatenate([p.k, np.broadcast_to(np.array(logs)[:, None], p.k.shape[:-1] + (1,))],
                                      axis=-1))


# -- geometry (seed 002's geometric readings) ---------------------------------------------------------------------
def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@problem_step
def self_attention_of_keys(p: Problem, unit: bool) -> Problem:
    """Q = K = X, X the keys (scaled to length 1 when `unit`), every query head reading its own kv head's tokens:
    query i of a head meets its own token as key i."""
    x = _unit(p.k) if unit else p.k
    return p.replace(k=x, q=np.repeat(x, p.q.shape[1] // p.k.shape[1], axis=1))


@problem_step
def unit_inputs(p: Problem) -> Problem:
    """Every query and key scaled to length 1."""
    return p.replace(q=_unit(p.q), k=_unit(p.k))


@problem_step
def keys_of_lengths(p: Problem) -> Problem:
    """Key j scaled by 2^((j mod 5) - 2), from 1/4 to 4."""
    return p.replace(k=p.k * 2.0 ** (np.arange(p.n_k) % 5 - 2)[:, None])


@problem_step
def cosine_directions(p: Problem) -> Problem:
    """q, k of lengths 1..4 and 2..4 along directions of +-1/4 entries: |x| and x / |x| are exact, and
    cos(q_i, k_j) is a multiple of 1/8 on a head of 16."""
    return p.replace(q=np.sign(p.q + 0.5) / 4 * (1 + np.arange(p.n_q) % 4)[:, None],
                     k=np.sign(p.k + 0.5) / 4 * (2 + np.arange(p.n_k) % 3)[:, None])


def hadamard_rotation(d: int, seed: int) -> np.ndarray:
    """Rows of the d x d Sylvester Hadamard matrix / sqrt(d), permuted and sign-flipped by a fixed seed: R R^T = I,
    and at d = 16 its +-1/4 entries keep integer inputs exact."""
    rng = np.random.default_rng(seed)
    order, signs = rng.permutation(d), rng.choice([-1.0, 1.0], d)
    h = np.array([[(-1.0) ** bin(i & j).count("1") for j in range(d)] for i in range(d)]) / np.sqrt(d)
    return h[order] * signs[:, None]


@problem_step
def hadamard_rotated(p: Problem, seed: int) -> Problem:
    """q_i -> R q_i and k_j -> R k_j for R = hadamard_rotation (rows: x -> x R^T)."""
    r = hadamard_rotation(p.q.shape[-1], seed)
    return p.replace(q=p.q @ r.T, k=p.k @ r.T)


@problem_step
def dual_basis_changed(p: Problem, seed: int, stretch: list) -> Problem:
    """q_i -> A q_i and k_j -> A^-T k_j for A = R D, R = hadamard_rotation and D = diag(stretch tiled):
    (A q).(A^-T k) = q.k."""
    r = hadamard_rotation(p.q.shape[-1], seed)
    diagonal = np.tile(stretch, p.q.shape[-1] // len(stretch))
    return p.replace(q=(p.q * diagonal) @ r.T, k=(p.k / diagonal) @ r.T)


@problem_step
def queries_seek_keys(p: Problem, score: float) -> Problem:
    """Keys of length 1; query i = score sqrt(d) k_(i mod n_k) of its kv head: with the default scale its score on
    that key is `score`, on every other key less."""
    k = _unit(p.k)
    group = p.q.shape[1] // p.k.shape[1]
    targets = np.repeat(k, group, axis=1)[:, :, np.arange(p.n_q) % p.n_k]
    return p.replace(k=k, q=score * np.sqrt(p.q.shape[-1]) * targets)


# -- positions (seed 000's 位置编码, seed 003's RoPE) ----------------------------------------------------------------
@problem_step
def rope_rotated(p: Problem, positions: list) -> Problem:
    """RoPE as models apply it: q and k rotated at `positions` (after the projections)."""
    at = np.array(positions)
    return p.replace(q=rotary_embedding(p.q, at), k=rotary_embedding(p.k, at))


@problem_step
def rope_projected(p: Problem, positions: list, seed: int) -> Problem:
    """Seed 003's placement: RoPE on the embeddings x = q at `positions`, then seeded Gaussian W_Q, W_K."""
    d = p.q.shape[-1]
    w = np.random.default_rng(seed).standard_normal((2, d, d)) / d ** 0.5
    x = rotary_embedding(p.q, np.array(positions))
    return p.replace(q=x @ w[0], k=x @ w[1])


@problem_step
def sinusoidally_encoded(p: Problem) -> Problem:
    """Self-attention on x + PE, x the queries and PE seed 000's sinusoidal encoding."""
    x = p.q + sinusoidal_encoding(p.n_q, p.q.shape[-1])
    return p.replace(q=x, k=x, v=x)
