"""The geometric reading's checks (seed 002 § 3.1.2; seed 000 § 向量化 and § 自注意力; seed 003 § 第一个概念): the
problems it is read on (self-attention, unit vectors, keys of many lengths) and what the observed weights must
show (cosines, symmetric scores, weights ranked by distance or by dot product)."""

from __future__ import annotations

import numpy as np

from harness.api.observe import ObservedWeights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from interpretations.exact_problems import EXACT_D, exact_problem
from protocol.registry import Variant
from specs.constructions import cosine_directions, keys_of_lengths, self_attention_of_keys, unit_inputs
from specs.derivations import keys_translated, values_affine, with_keywords
from specs.problems import Problem
from specs.reference import repeat_kv
from specs.tolerance import (
    Allowance,
    cosine_exponent_allowance,
    difference_allowance,
    dot_product_allowance,
    unit_roundoff,
)

U = unit_roundoff(np.float64)
A_VALUES = -1.5  # a negative, non-integer a: reflection and stretch at once, exact on integer values
TAU = 0.1  # the seed's temperature (0.1是温度系数)


def self_attention(problem: Problem, *, unit: bool = False) -> Problem:
    """Q = K = X: X is the problem's keys (scaled to length 1 when `unit`), and every query head reads its
    own kv head's tokens, so query i of a head meets its own token as key i."""
    return problem.derive(self_attention_of_keys, unit)


def unit_queries_and_keys(problem: Problem) -> Problem:
    return problem.derive(unit_inputs)


def keys_of_many_lengths(problem: Problem) -> Problem:
    """Key j scaled by 2^((j mod 5) - 2), from 1/4 to 4: keys far from the query can still align with it."""
    return problem.derive(keys_of_lengths)


def orthogonal_move(q: np.ndarray, k: np.ndarray, seed: int) -> np.ndarray:
    """q plus 3 |q| times a unit vector orthogonal to every key (k of one head: (1, 1, n_k, d), d > n_k)."""
    keys = k[0, 0]
    residual = np.random.default_rng(seed).standard_normal(keys.shape[1])
    residual -= keys.T @ np.linalg.lstsq(keys.T, residual, rcond=None)[0]
    return q + 3.0 * np.linalg.norm(q, axis=-1, keepdims=True) * residual / np.linalg.norm(residual)


def expect_cosine_weights(trial: Trial, observed: ObservedWeights) -> None:
    """Self-attention on unit tokens scores s cos(x_i, x_j), with cos in [-1, 1] and cos(x_i, x_i) = 1 (s > 0).
    So within a row W_ij / W_il = e^{s (x_i.x_j - x_i.x_l)} <= e^{2 s |x_i| max_m |x_m|} (the cosine range), and
    W_ij / W_ii <= e^{s |x_i| max(0, |x_j| - |x_i|)} (a token's own key scores highest). Norms are those of the
    tokens the implementation received (unit up to its dtype's rounding); the exponents carry
    cosine_exponent_allowance(s, d) for the float64 norms and products of this check."""
    x = trial.exact_inputs(observed.problem)[0]
    s = observed.oracle.scale
    norms = np.linalg.norm(x, axis=-1)[..., :, None]  # (..., n, 1)
    rounding = cosine_exponent_allowance(s, x.shape[-1]).bound
    low, high = observed.weights - observed.allowance.bound, observed.weights + observed.allowance.bound
    spread = np.exp(2 * s * norms * norms.max(axis=-2, keepdims=True) + rounding)
    too_far = low.max(axis=-1, keepdims=True) - spread * high.min(axis=-1, keepdims=True)
    if np.any(too_far > 0):
        row = tuple(int(i) for i in np.unravel_index(int(np.argmax(too_far)), too_far.shape)[:-1])
        trial.fail(f"on unit tokens two weights of row {row} differ by more than scores in [-s, s] allow",
                   observed.problem, details=(f"max/min weight {observed.weights[row].max():.6g} / "
                                              f"{observed.weights[row].min():.6g} > e^(2s) = {spread[row][0]:.6g}",))
    own_limit = _diagonal(high) * np.exp(s * norms * np.maximum(norms.swapaxes(-1, -2) - norms, 0.0) + rounding)
    above_own = low - own_limit
    if np.any(above_own > 0):
        where = np.unravel_index(int(np.argmax(above_own)), above_own.shape)
        i, j = where[-2:]
        trial.fail(f"on unit tokens key {j} gets more weight than query {i}'s own key, whose cosine 1 is the "
                   "largest score", observed.problem,
                   details=(f"W[{i},{j}] = {observed.weights[where]:.6g} > W[{i},{i}] = "
                            f"{observed.weights[where[:-1] + (i,)]:.6g}",))


def expect_symmetric_scores(trial: Trial, observed: ObservedWeights) -> None:
    """With Q = K = X the scores are s X X^T, symmetric with diagonal s|x_i|^2. W_ij = e^{S_ij} / Z_i, so
    S_ij = log W_ij - log W_ii + s|x_i|^2 whatever Z_i: the scores read off the weights must satisfy
    S_ij = S_ji. Allowed |S_ij - S_ji|: the four log-weight errors (_log_weights), s gamma_{d+1} |x|^2 for each
    s|x|^2, and 4u per term magnitude for the float64 logs and sums of this check. Pairs with a weight
    within its allowance of 0 are not checked."""
    x = trial.exact_inputs(observed.problem)[0]
    s = observed.oracle.scale
    logs, log_error = _log_weights(observed)
    own = s * np.sum(x * x, axis=-1)[..., :, None]
    own_error = abs(s) * _diagonal(dot_product_allowance(x, x).bound)
    scores = logs - _diagonal(logs) + own
    magnitude = np.abs(logs) + np.abs(_diagonal(logs)) + np.abs(own)
    rule = "log-weight errors + s gamma_{d+1} |x_i|^2 + 4u per term"
    error = Allowance(log_error + _diagonal(log_error) + own_error + 4 * U * magnitude, rule)
    allowed = difference_allowance(error, Allowance(error.bound.swapaxes(-1, -2), rule))
    checked = np.isfinite(allowed.bound)
    trial.expect_close(np.where(checked, scores, 0.0), np.where(checked, scores.swapaxes(-1, -2), 0.0),
                       Allowance(np.where(checked, allowed.bound, 0.0), f"{allowed.rule}; unchecked where a weight "
                                 "is within its allowance of 0"),
                       what="S_ij = log W_ij - log W_ii + s|x_i|^2", problem=observed.problem,
                       versus="S_ji (Q = K = X: the scores are the symmetric matrix s X X^T)")


def expect_weights_rank_by_distance(trial: Trial, observed: ObservedWeights) -> None:
    """Unit q, k: |q_i - k_j|^2 = 2 - 2 q_i.k_j, so a nearer key has the larger dot product and may not get a
    smaller weight. For the vectors received (unit up to rounding), key j is surely nearer than key m when
    d2_m - d2_j exceeds | |k_j|^2 - |k_m|^2 | plus both distances' rounding: then q_i.k_j > q_i.k_m."""
    q, k, _ = trial.exact_inputs(observed.problem)
    lengths_squared = np.sum(repeat_kv(k, q.shape[1] // k.shape[1]) ** 2, axis=-1)
    margin_lengths = np.abs(lengths_squared[..., :, None] - lengths_squared[..., None, :])
    for i, weights, bound, squared, rounding in _pairs(observed, q, k):
        margin = margin_lengths + rounding[..., :, None] + rounding[..., None, :]
        nearer = squared[..., :, None] + margin < squared[..., None, :]  # (..., j, m): key j surely nearer
        smaller = weights[..., :, None] + bound[..., :, None] < weights[..., None, :] - bound[..., None, :]
        if np.any(nearer & smaller):
            *row, j, m = _first(nearer & smaller)
            row = tuple(row)
            trial.fail(f"on unit vectors key {j}, nearer to query {i} than key {m}, gets a smaller weight",
                       observed.problem,
                       details=(f"|q - k_{j}|^2 = {squared[row + (j,)]:.6g} < |q - k_{m}|^2 = "
                                f"{squared[row + (m,)]:.6g}, but W = {weights[row + (j,)]:.6g} < "
                                f"{weights[row + (m,)]:.6g}",))


def expect_dot_product_ranks_like_distance(trial: Trial, observed: ObservedWeights) -> None:
    """Seed 003 literally: the dot product judges distance, so a key given clearly more weight (a larger dot
    product) is nearer the query. Tested on pairs whose weights differ by more than their allowances and
    whose distances differ by more than their rounding."""
    q, k, _ = trial.exact_inputs(observed.problem)
    for i, weights, bound, squared, rounding in _pairs(observed, q, k):
        preferred = (weights - bound)[..., :, None] > (weights + bound)[..., None, :]  # (..., j, m): j over m
        farther = squared[..., :, None] - rounding[..., :, None] > squared[..., None, :] + rounding[..., None, :]
        if np.any(preferred & farther):
            *row, j, m = _first(preferred & farther)
            row = tuple(row)
            trial.fail(f"key {j} gets more weight than key {m} from query {i} but is farther from the query: "
                       "an unnormalised dot product does not rank like a distance", observed.problem,
                       details=(f"W = {weights[row + (j,)]:.6g} > {weights[row + (m,)]:.6g}; |q - k|^2 = "
                                f"{squared[row + (j,)]:.6g} > {squared[row + (m,)]:.6g}",))


def _diagonal(x: np.ndarray) -> np.ndarray:
    """The diagonal of the last two axes, as a column (..., n, 1)."""
    return np.diagonal(x, axis1=-2, axis2=-1)[..., :, None]


def _log_weights(observed: ObservedWeights) -> tuple[np.ndarray, np.ndarray]:
    """log W and its error bound: |log W - log W*| <= -log(1 - b/W) when |W - W*| <= b < W; inf (not
    checkable) where the weight is within its allowance of 0."""
    weights, bound = observed.weights, observed.allowance.bound
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(weights), np.where(weights > bound, -np.log1p(-bound / weights), np.inf)


def _pairs(observed: ObservedWeights, q: np.ndarray, k: np.ndarray):
    """Per query row i: (row index, weights, allowances, squared distances, their rounding), each (..., n_k),
    so pairwise comparisons (..., n_k, n_k) stay small for long sequences."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])
    squared, rounding = _squared_distances(q, k)
    for i in range(q.shape[-2]):
        yield (i, observed.weights[..., i, :], observed.allowance.bound[..., i, :], squared[..., i, :],
               rounding[..., i, :])


def _first(condition: np.ndarray) -> tuple[int, ...]:
    return tuple(int(w) for w in np.argwhere(condition)[0])


def _squared_distances(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|q_i - k_j|^2 = |q_i|^2 + |k_j|^2 - 2 q_i.k_j (..., n_q, n_k) and its float64 rounding bound,
    gamma_{d+3} (|q_i| + |k_j|)^2."""
    q_norms, k_norms = np.linalg.norm(q, axis=-1)[..., :, None], np.linalg.norm(k, axis=-1)[..., None, :]
    squared = q_norms ** 2 + k_norms ** 2 - 2 * q @ k.swapaxes(-1, -2)
    return squared, (q.shape[-1] + 3) * U * (q_norms + k_norms) ** 2


def _seeded(seed: int, draw) -> list:
    """A list drawn from a fixed seed, written out in the derived problem's step (so the repro shows it)."""
    return np.asarray(draw(np.random.default_rng(seed))).tolist()


def cosine_problems(variant: Variant, problem: Problem, tau: float = TAU) -> tuple[Problem, Problem]:
    """(raw, unit): raw q, k of lengths 1..4 and 2..4 along directions of +-1/4 entries, so |x| and x / |x|
    are exact and cos(q_i, k_j) is a multiple of 1/8; unit: them normalised with scale 1/tau (folded into
    q as sqrt(d) / tau for an implementation without a scale keyword, whose default is 1/sqrt(d))."""
    raw = problem.derive(cosine_directions)
    unit = raw.derive(unit_inputs)
    if variant.capabilities.scale:
        return raw, unit.derive(with_keywords, scale=1 / tau)
    return raw, unit.scale_queries(float(np.sqrt(EXACT_D) / tau))


def cosines(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """cos(q_i, k_j) in float64 (..., n_q, n_k), query head h against kv head h // group: the seed's
    torch.cosine_similarity(query.unsqueeze(1), key.unsqueeze(0), dim=-1) per head."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])
    norms = np.linalg.norm(q, axis=-1)[..., :, None] * np.linalg.norm(k, axis=-1)[..., None, :]
    return (q @ k.swapaxes(-1, -2)) / norms


def expect_cosine_attention(variant: Variant, problem: Problem) -> float:
    """The implementation on unit q, k with scale 1/tau against cosine attention softmax(cos / tau) V of the raw
    q, k. Here the raw cosines / tau equal the scaled scores of the unit inputs the implementation receives
    bit for bit (asserted), so the float64 oracle on those inputs is cosine attention of the raw ones, and
    the implementation is allowed its forward allowance there."""
    raw, unit = cosine_problems(variant, problem)
    trial = Trial(variant, raw)
    oracle, allowance = trial.oracle(unit)
    if not np.array_equal(cosines(raw.q, raw.k) * (1 / TAU), oracle.scores):
        raise AssertionError("cosine_problems no longer gives exact unit vectors: the check would blame rounding")
    return trial.expect_close(trial.call(unit), oracle.out, allowance, what="out(q/|q|, k/|k|, scale=1/tau)",
                              versus=f"cosine attention softmax(cos(q_i, k_j) / {TAU}) V of the raw q, k",
                              problem=unit)


def translated_keys(problem: Problem, seed: int) -> Problem:
    """Every key moved by one integer vector c, entries in [-2, 2]: each row's scores move by s q_i.c."""
    c = _seeded(seed, lambda rng: rng.integers(-2, 3, problem.k.shape[-1]).astype(float))
    return problem.derive(keys_translated, c)


def expect_key_translation_invariance(variant: Variant, problem: Problem) -> float:
    trial = Trial(variant, problem)
    return trial.expect_unchanged(translated_keys(problem, 101), what="out(every key + c)",
                                  versus="out (the scores move by s q_i.c, the same for every key of row i)")


def affine_values(problem: Problem, seed: int) -> tuple[Problem, np.ndarray]:
    """V -> a V + b, b an integer vector in [-20, 20] (d_v entries)."""
    b = _seeded(seed, lambda rng: rng.integers(-20, 21, problem.v.shape[-1]).astype(float))
    return problem.derive(values_affine, A_VALUES, b), np.array(b)


def expect_value_affine_equivariance(variant: Variant, problem: Problem) -> float:
    trial = Trial(variant, problem)
    mapped, b = affine_values(problem, 102)
    return trial.expect_affine_image(mapped, A_VALUES, b, what="out(a V + b)",
                                     versus=f"a out(V) + b (a = {A_VALUES:g}; each row's weights sum to 1)")


@reproducible
def check_cosine_attention(variant: Variant) -> float:
    """geometric-cosine-every-implementation on the variant's exact problem: the largest error / allowed."""
    return expect_cosine_attention(variant, exact_problem(variant, seed=100))


@reproducible
def check_key_translation(variant: Variant) -> float:
    """key-translation-invariance on the variant's exact problem: the largest error / allowed."""
    return expect_key_translation_invariance(variant, exact_problem(variant, seed=101))


@reproducible
def check_value_affine_map(variant: Variant) -> float:
    """value-affine-equivariance on the variant's exact problem: the largest error / allowed."""
    return expect_value_affine_equivariance(variant, exact_problem(variant, seed=102))
