"""The probabilistic reading (seed 001 § 1.3 (1); seed 002 § 3.1.1), checked on every implementation.

注意力机制本质上可以认为是求一个离散概率分布的数学期望: out_i = E_{j ~ W_i}[v_j], with W_i the weights the
implementation itself produced (read through one-hot values, harness.api.observe), not the oracle's.
注意力机制可以被视为一种最优线性逼近的方法: out_i minimises sum_j P_ij |x - v_j|^2.
The temperature limits of that distribution (scale -> infinity: argmax attention, ties split equally;
scale -> 0: the mean of the visible values; entropy falling as the scale grows), and where the 四不像
example's weight 0 can come from (a mask, or an exp that underflows in the implementation's dtype).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.api.exhibits import exhibit
from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from protocol.registry import Variant
from specs.constructions import integer_scored, ladder_of_gaps, residue_masked
from specs.derivations import with_keywords
from specs.problems import Problem, build
from specs.statistics import ALPHA, bernstein_radius
from specs.tolerance import (
    Allowance,
    difference_allowance,
    elementwise_product_allowance,
    normalised_weights_allowance,
    product_allowance,
    row_sum_allowance,
    temperature_limit,
    underflow_gap_window,
    weights_entropy_allowance,
)

DRAWS = 20_000
CHECKPOINTS = (10, 30, 100, 300, 1000, 3000, 10_000, DRAWS)
SEED = 50_000


def _normalised(weights: np.ndarray) -> np.ndarray:
    """max(W, 0) with rows scaled to sum 1: the distribution a sampler draws from (rows summing to 1 and weights
    in [0, 1] are rows-sum-to-one's business; this reading asks what W, as a distribution, averages to)."""
    clipped = np.clip(weights, 0.0, None)
    return clipped / clipped.sum(axis=-1, keepdims=True)


@checks("attention-is-expectation")
def test_output_is_expectation_of_values_under_weights(variant):
    """The output is the exact expectation sum_j W_ij v_j under the implementation's own weights W (read off one-hot
    values, normalised), within out's allowance and W's carried through V; and Monte Carlo agrees: j ~ W_i drawn
    DRAWS times per row; at each of CHECKPOINTS sample sizes N the mean of v_j must lie within Bernstein's
    radius (statistics.bernstein_radius: the CLT's z sigma / sqrt(N) with sigma the spread of v under W_i, plus
    b L / 3N, valid at every N) of the implementation's out_i, plus out's allowance and W's carried through V.
    False alarm: ALPHA = 1e-9 per implementation, split over rows x coordinates x checkpoints (union bound);
    over a run of ~70 implementations 7e-8. Power: the same test rejects the uniform mean of V, and an
    implementation that applies other weights to real values than it shows on one-hot ones
    (tests/suite_run/test_expectations_caught.py)."""
    check_output_is_expectation_of_values_under_weights(variant)


@reproducible
def check_output_is_expectation_of_values_under_weights(variant) -> None:
    """The check of test_output_is_expectation_of_values_under_weights."""
    d_v = 3 if variant.capabilities.value_dim else 12
    problem = build(batch=1, heads=2, heads_kv=2, n_q=12, n_k=12, d=12, d_v=d_v, seed=SEED).scale_queries(2.0)
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    _, out_allowance = trial.oracle()
    out = trial.call()
    values = trial.values_per_query_head()
    if np.any(np.clip(observed.weights, 0.0, None).sum(axis=-1) <= 0):
        trial.fail("a row of weights has no positive mass to sample from", observed.problem)
    weights = _normalised(observed.weights)
    mean = weights @ values
    variance = np.maximum(weights @ values**2 - mean**2, 0.0)
    spread = np.max(np.abs(values[..., None, :, :] - mean[..., :, None, :]), axis=-2)
    rng = np.random.default_rng(SEED)
    rows = weights.reshape(-1, problem.n_k)
    draws = np.stack([rng.choice(problem.n_k, size=DRAWS, p=row) for row in rows]).reshape(
        *weights.shape[:-1], DRAWS)
    drawn = np.take_along_axis(values[..., None, :, :], draws[..., None], axis=-2)  # (b, h, n_q, DRAWS, d_v)
    running = np.cumsum(drawn, axis=-2)
    tests = rows.shape[0] * d_v * len(CHECKPOINTS)
    allowance = out_allowance + product_allowance(
        normalised_weights_allowance(observed.allowance, observed.oracle.weights), weights, values)
    # the exact expectation first: what Monte Carlo's 1/sqrt(N) cannot resolve (an output off its own weights by
    # a relative 1e-3) it sees at once
    trial.expect_close(out, mean, allowance, what="out",
                       versus="the exact expectation sum_j W_ij v_j under the implementation's own weights")
    errors, radii, standard_errors = [], [], []
    for n in CHECKPOINTS:
        sample_mean = running[..., n - 1, :] / n
        radius = bernstein_radius(n, variance, spread, ALPHA / tests)
        trial.expect_close(out, sample_mean, Allowance(radius + allowance.bound, "Bernstein radius + allowance"),
                           what="out", versus=f"the mean of {n} values drawn from the implementation's own weights")
        errors.append(float(np.max(np.abs(sample_mean - out))))
        radii.append(float(np.max(radius + allowance.bound)))
        standard_errors.append(float(np.sqrt(variance.max() / n)))
    uniform = np.broadcast_to(values.mean(axis=-2, keepdims=True), out.shape)
    assert np.any(np.abs(uniform - running[..., -1, :] / DRAWS) > radius), \
        "no power: the test cannot reject uniform weights"
    exhibit("mc-convergence", "curves", {
        "x_label": "samples N drawn from the implementation's weights", "y_label": "max |sample mean - out|",
        "log_x": True, "log_y": True, "outliers": False,  # each implementation's draws differ: noise, not defects
        "series": {variant.dtype: {"x": list(CHECKPOINTS), "y": errors}},
        "band": {"one standard error .. Bernstein bound (the first implementation's)": {
            "x": list(CHECKPOINTS), "low": standard_errors, "high": radii}},
    }, caption="The Monte Carlo mean of values drawn from each implementation's own weights approaches its output "
               "like 1/sqrt(N), inside the CLT-shaped Bernstein band the test allows (one curve per dtype).")


@checks("attention-optimal-linear-approximation")
@given(data=st.data())
def test_output_minimises_weighted_squared_distance(variant, data):
    """The minimiser of sum_j W_ij |x - v_j|^2 solves (sum_j W_ij) x = (W V)_i: compare both sides,
    with W the weights the implementation applied (read off one-hot values)."""
    problem = data.draw(problems_for(variant, weights_visible=True), label="problem")
    check_output_minimises_weighted_squared_distance(variant, problem)


@reproducible
def check_output_minimises_weighted_squared_distance(variant, problem) -> None:
    """The check of test_output_minimises_weighted_squared_distance on one problem."""
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    _, out_allowance = trial.oracle()
    out = trial.call()
    values = trial.values_per_query_head()
    mass = observed.weights.sum(axis=-1, keepdims=True)
    mass_allowance = row_sum_allowance(observed.allowance, observed.weights)
    allowance = (product_allowance(observed.allowance, observed.weights, values)
                 + elementwise_product_allowance(mass, mass_allowance, out, out_allowance))
    trial.expect_close(mass * out, observed.weights @ values, allowance, what="(sum_j W_ij) out_i",
                       versus="(W V)_i, the weighted least-squares optimality condition")


# ---- temperature -------------------------------------------------------------------------------------------

TEMPERATURE_N = 12
COLD_SCALE = 40.0  # integer scores 0..3: untied gaps >= 1, so the cold limit's deviation <= 11 e^-40 = 5e-17
HOT_SCALE = 1e-9  # score spread <= 3e-9: every weight within 3e-9 / n of uniform
ENTROPY_SCALES = (0.1, 0.3, 1.0, 3.0, 10.0, COLD_SCALE)


def integer_scores(d_v: int = 3) -> Problem:
    """Scores c_ij in {0, 1, 2, 3} (seeded), row 0 all equal (a full tie): one-hot keys e_j in d = 16 and q_i = c_i,
    so q.k_j = c_ij exactly and the default scale 1/4 is a power of two. Rows tie at their top or not."""
    return build(n_q=TEMPERATURE_N, n_k=TEMPERATURE_N, d=16, d_v=d_v, seed=SEED).derive(integer_scored, 7)


def at_scale(variant: Variant, problem: Problem, scale: float) -> Problem:
    """Scores scale * c: through the scale keyword where the implementation takes it, else q * 4 scale (the
    default scale 1/sqrt(16) = 1/4 undoes the 4 exactly)."""
    if variant.capabilities.scale:
        return problem.derive(with_keywords, scale=scale)
    return problem.scale_queries(4 * scale)


@checks("scale-to-infinity-is-argmax")
def test_large_scale_gives_argmax_with_ties_split(variant):
    """At scale 40 on integer scores, the implementation's weights (one-hot values) are within its allowance plus
    specs.tolerance.temperature_limit's analytic bound of the limit: 1/t on a row's t tied top keys, 0 elsewhere."""
    check_large_scale_gives_argmax_with_ties_split(variant)


@reproducible
def check_large_scale_gives_argmax_with_ties_split(variant) -> None:
    """The check of test_large_scale_gives_argmax_with_ties_split."""
    problem = at_scale(variant, integer_scores(), COLD_SCALE)
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    limit, deviation = temperature_limit(observed.oracle.scores, "cold")
    trial.expect_close(observed.weights, limit, observed.allowance + deviation, what="weights at scale 40",
                       versus="argmax attention (1/t on t tied top scores, 0 elsewhere)", problem=observed.problem)


def masked(problem: Problem) -> Problem:
    """A fixed mask hiding key j from query i when (i + 2 j) % 3 == 0: every row keeps 8 of 12 keys."""
    return problem.derive(residue_masked)


@checks("scale-to-zero-is-mean")
def test_small_scale_gives_mean_of_visible_values(variant):
    """At scale 1e-9 the output is the plain mean of the values the row may see (a mask where the implementation
    takes one): within out's allowance plus the hot limit's (e^r - 1) / n per weight, carried through V."""
    check_small_scale_gives_mean_of_visible_values(variant)


@reproducible
def check_small_scale_gives_mean_of_visible_values(variant) -> None:
    """The check of test_small_scale_gives_mean_of_visible_values."""
    problem = integer_scores(3 if variant.capabilities.value_dim else 16)
    if variant.capabilities.mask:
        problem = masked(problem)
    problem = at_scale(variant, problem, HOT_SCALE)
    trial = Trial(variant, problem)
    oracle, allowance = trial.oracle()
    out = trial.call()
    values = trial.values_per_query_head()
    limit, deviation = temperature_limit(oracle.scores, "hot")
    what = "mean of the visible values" if problem.mask is not None else "mean of the values"
    trial.expect_close(out, limit @ values, allowance + product_allowance(deviation, limit, values),
                       what="out at scale 1e-9", versus=f"the {what}")


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """-sum_j W_ij log W_ij over max(W, 0), per row (..., 1)."""
    w = np.clip(weights, 0.0, None)
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=-1, keepdims=True)


@checks("entropy-falls-with-scale")
def test_entropy_falls_as_scale_grows(variant):
    """d H(softmax(s c)) / ds = -s Var_P(c) <= 0. On ENTROPY_SCALES the entropy of the implementation's rows may
    rise from one scale to the next by at most the two entropies' allowances (weights_entropy_allowance: its
    weight allowance carried through -x log x)."""
    check_entropy_falls_as_scale_grows(variant)


@reproducible
def check_entropy_falls_as_scale_grows(variant) -> None:
    """The check of test_entropy_falls_as_scale_grows."""
    base = integer_scores()
    entropies, slacks, problems = [], [], []
    trial = Trial(variant, base)
    for scale in ENTROPY_SCALES:
        observed = observe_weights(trial, at_scale(variant, base, scale))
        entropies.append(row_entropy(observed.weights))
        slacks.append(weights_entropy_allowance(observed.allowance, observed.oracle.weights))
        problems.append(observed.problem)
    for m in range(len(ENTROPY_SCALES) - 1):
        rise = np.maximum(entropies[m + 1] - entropies[m], 0.0)
        low, high = ENTROPY_SCALES[m], ENTROPY_SCALES[m + 1]
        trial.expect_close(rise, np.zeros_like(rise), difference_allowance(slacks[m], slacks[m + 1]),
                           what=f"rise of the row entropy from scale {low:g} to {high:g}",
                           versus="0 (entropy non-increasing in the scale)", problem=problems[m + 1])


# ---- where an exact 0 comes from ---------------------------------------------------------------------------

ZERO_N = 16


def underflow_ladder(lowest: float, highest: float) -> Problem:
    """Row i scores key 0 at 0 and keys 1..15 at -g for 15 consecutive gaps g of a 240-step ladder: 120 steps from
    0.5 up to `lowest`, 120 from `lowest` to 1.1 x `highest` (one-hot keys, d = 16, the default scale 1/4 undone
    by q = -4 g)."""
    return build(n_q=ZERO_N, n_k=ZERO_N, d=ZERO_N, d_v=ZERO_N, seed=SEED).derive(ladder_of_gaps, lowest, highest)


@checks("siwuxiang-zero-needs-mask-or-underflow")
def test_exact_zero_only_where_the_dtype_underflows(variant):
    """The 四不像 frog's weight 0, unmasked: a weight P = e^-g / Z is exactly 0 only past the dtype's underflow.
    On a ladder of gaps, no weight with -log P below underflow_gap_window's lowest end (twice the smallest normal
    of the output and of float32 inside low-precision kernels) may be 0, and every weight past its highest end
    (a quarter of the output's smallest subnormal) must be: the first exact 0 lies in the window."""
    check_exact_zero_only_where_the_dtype_underflows(variant)


@reproducible
def check_exact_zero_only_where_the_dtype_underflows(variant) -> None:
    """The check of test_exact_zero_only_where_the_dtype_underflows."""
    lowest, highest = underflow_gap_window(variant.dtype)
    trial = Trial(variant, underflow_ladder(lowest, highest))
    observed = observe_weights(trial)
    oracle = observed.oracle
    neg_log = oracle.lse[..., None] - oracle.scores  # -log P_ij, exact where P underflows in float64 too
    gaps = oracle.scores.max(axis=-1, keepdims=True) - oracle.scores
    zero = observed.weights == 0
    early = zero & (neg_log < lowest)
    unmasked = np.arange(ZERO_N) > 0  # key 0 holds the row's top score
    first = float(np.min(np.where(zero & unmasked, neg_log, np.inf)))
    last = float(np.max(np.where(~zero & unmasked, neg_log, -np.inf)))
    exhibit("zero-weight-threshold", "table", {
        "columns": ["dtype", "largest -log P still nonzero", "first -log P giving an exact 0",
                    "predicted window of the first 0"],
        "rows": [[variant.dtype, f"{last:.2f}",
                  f"{first:.2f}" if np.isfinite(first) else f"none up to {float(neg_log.max()):.1f}",
                  f"[{lowest:.1f}, {highest:.1f}]"]],
    }, caption="Softmax of finite scores is never 0: an exact 0 (the 四不像 frog's) first appears where the score "
               "gap (-log P = gap + log Z, Z ~ 1 there) makes the weight underflow in the implementation's dtype.")
    if np.any(early):
        where = tuple(int(x) for x in np.argwhere(early)[0])
        trial.fail("a weight is exactly 0 though no mask hides it and its exact value is far above underflow",
                   observed.problem, details=(f"weight{where} = 0 at score gap {gaps[where]:.4g} (-log P = "
                                              f"{neg_log[where]:.4g}); {variant.dtype} may give 0 only past "
                                              f"-log P = {lowest:.4g}",))
    late = ~zero & (neg_log > highest)
    if np.any(late):
        where = tuple(int(x) for x in np.argwhere(late)[0])
        trial.fail("a weight below a quarter of the dtype's smallest subnormal is not 0",
                   observed.problem, details=(f"weight{where} = {observed.weights[where]!r} at score gap "
                                              f"{gaps[where]:.4g} (-log P = {neg_log[where]:.4g} > {highest:.4g})",))
