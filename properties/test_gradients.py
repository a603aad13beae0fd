"""Gradients of every implementation that gives them (Capabilities.gradients: torch autograd or a declared
backward) against the float64 oracle's backward (specs.gradients), within specs.tolerance.gradient_allowance.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播); seed 000 § Flash Attention (the backward recomputes the
weights block by block: for any block sizes it must equal the global gradients).

Hypothesis draws stay small (n <= 48, d <= 32); the fixed gradient regimes (specs.regimes) reach where backward
kernels switch paths: a second key block (n = 513, 1025), d = 64 and 128, GQA groups of 4 and 8, causal with
n_q != n_k in the declared alignment, an explicit scale, dropout, the implementation's own block sizes. The
long ones (n >= 1025) run with --impl and in `tox -e long`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.regime_cases import LONG_MARKER, cases, skip_unless_fits
from harness.api.trial import Trial, problems_for
from properties import test_regimes as forward_regimes
from specs import regimes
from specs.dropout_mask import keep_mask
from specs.problems import Problem, build
from specs.tolerance import ToleranceUndefined, gradient_allowance

GRADIENT_DROPOUT_P = 0.2
SMALL = dict(max_n=48, max_d=32)
MOD_GRADIENT_NAMES = {"bias": "dBias", "sinks": "dSinks"}  # what a failure calls the modification arrays' gradients
LONGEST_BLOCK_CASE = 4097  # lengths around default block sizes past this are skipped, with the reason


def _d_out(problem: Problem, seed: int, dtype) -> np.ndarray:
    shape = problem.q.shape[:3] + (problem.v.shape[-1],)
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _dropout(seed: int) -> dict:
    """The implementation's dropout keywords at GRADIENT_DROPOUT_P under `seed`."""
    return dict(dropout_p=GRADIENT_DROPOUT_P, dropout_seed=seed)


def _oracle_dropout(problem: Problem, extra: dict) -> tuple[dict, str]:
    """The oracle's keywords for the dropout in `extra` (the mask the seed and the position decide), and the same as
    source for the repro (no dropout: nothing)."""
    if "dropout_seed" not in extra:
        return {}, ""
    seed, p = extra["dropout_seed"], extra["dropout_p"]
    keep = keep_mask(seed, p, problem.q.shape[:3] + (problem.n_k,))
    code = f", keep=keep_mask({seed}, {p!r}, q.shape[:3] + (k.shape[2],)), dropout_p={p!r}"
    return dict(keep=keep, dropout_p=p), code


def _gradient_repro(trial: Trial, seed: int, extra: dict, oracle_code: str, wrt: tuple[str, ...] = ()) -> str:
    """The repro's lines after the input is rebuilt: the backward on the same d_out, then the oracle's backward and
    the verdict of each gradient within specs.tolerance.gradient_allowance, as the property compares them."""
    keywords = "".join(f", {key}={value!r}" for key, value in extra.items())
    names = ("dQ", "dK", "dV", *(MOD_GRADIENT_NAMES[name] for name in wrt))
    lines = [
        "from harness.engine.backward import backward_of",
        "from specs.dropout_mask import keep_mask",
        "from specs.tolerance import gradient_allowance",
        f"d_out = np.random.default_rng({seed}).standard_normal(q.shape[:3] + (v.shape[-1],))"
        f".astype({str(trial.dtype)!r})",
        f"p = p.handed({trial.variant.dtype!r})",
        f"grads = backward_of(load_impl({trial.variant.impl.target!r}), q, k, v, d_out, **p.kwargs(){keywords}"
        f"{f', wrt={wrt!r}' if wrt else ''})",
        "oracle = gradient_allowance(*(x.astype(float) for x in (q, k, v)), d_out.astype(float), "
        f"dtype={trial.variant.dtype!r}, **p.kwargs(), "
        f"causal_alignment={trial.variant.capabilities.causal_alignment!r}{oracle_code})",
        f"expected = list(zip(oracle.grads, oracle.allowances)) + [oracle.mod_grads[name] for name in {wrt!r}]",
        f"for name, g, (exact, allowed) in zip({names!r}, grads, expected):",
        "    print(verdict(as_float64(g), exact, allowed, what=name, versus=\"the float64 oracle's backward\"))",
    ]
    return "\n".join(lines)


def check_gradients(trial: Trial, problem: Problem, *, seed: int, extra: dict, wrt: tuple[str, ...] = ()) -> tuple:
    """dQ, dK, dV of the implementation (called with `extra`: block sizes, dropout), and the gradients of the
    modification arrays named in `wrt`, against the oracle's; returns the implementation's dQ, dK, dV (float64)."""
    d_out = _d_out(problem, seed, trial.dtype)
    oracle_extra, oracle_code = _oracle_dropout(problem, extra)
    call_line = _gradient_repro(trial, seed, extra, oracle_code, wrt)
    grads = trial.gradients(problem, d_out, wrt=wrt, call_line=call_line, **extra)
    exact = trial.exact_inputs(problem)
    try:
        oracle = gradient_allowance(*exact, d_out.astype(np.float64), dtype=trial.dtype,
                                    **trial.oracle_kwargs(problem), **oracle_extra)
    except ToleranceUndefined:
        if trial.in_hypothesis:
            from hypothesis import reject

            reject()
        raise
    got = tuple(g.astype(np.float64) for g in grads)
    expected = list(zip(oracle.grads, oracle.allowances, strict=True)) + [oracle.mod_grads[name] for name in wrt]
    names = ("dQ", "dK", "dV", *(MOD_GRADIENT_NAMES[name] for name in wrt))
    for name, g, (exact_grad, allowance) in zip(names, got, expected, strict=True):
        if not np.all(np.isfinite(g)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(g))[0])
            trial.fail(f"{name} is {g[bad]} at {list(bad)} where the oracle's backward gives {exact_grad[bad]:.6g} "
                       f"({int((~np.isfinite(g)).sum())} non-finite elements)", problem, call_line=call_line)
        trial.expect_close(g, exact_grad, allowance, what=name, versus="the float64 oracle's backward",
                           problem=problem, call_line=call_line)
    return got[:3]


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@given(data=st.data())
def test_gradients_match_the_oracle_backward(variant, data):
    """dQ, dK, dV for drawn shapes, scales, masks or causal, block sizes (the tiled backward must equal the
    global gradients for any blocks) and, where the implementation takes dropout_seed, dropout."""
    caps = variant.capabilities
    blocks = {keyword: data.draw(st.integers(caps.min_block_size, 70), label=keyword) for keyword in caps.tile_keywords}
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, **SMALL), label="problem")
    extra = dict(blocks)
    if caps.dropout_seed and data.draw(st.booleans(), label="dropout"):
        extra.update(_dropout(data.draw(st.integers(0, 2**32 - 1), label="dropout_seed")))
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=extra)


@checks("fully-masked-rows-zero-gradients")
@pytest.mark.requires("gradients", "mask")
@given(data=st.data())
def test_fully_masked_rows_have_zero_gradients(variant, data):
    """A query row that sees no key has output 0 whatever q is: its dQ row is exactly 0 (never NaN), and no
    other gradient turns NaN."""
    problem = data.draw(problems_for(variant, masked=True, min_n=2, **SMALL), label="problem")
    row = data.draw(st.integers(0, problem.n_q - 1), label="fully masked row")
    check_fully_masked_rows(variant, problem, [row])


def check_fully_masked_rows(variant, problem: Problem, rows: list[int]) -> None:
    """Hide every key from `rows` (the row after each keeps key 0) and check the gradients, then that the dQ
    rows of those rows are exactly 0."""
    keep = sorted({(row + 1) % problem.n_q for row in rows} - set(rows))
    problem = problem.derive(
        "m = np.broadcast_to(p.mask, p.q.shape[:3] + (p.n_k,)).copy(); "
        f"m[:, :, {rows}] = False; m[:, :, {keep}, 0] = True; p = p.replace(mask=m)")
    trial = Trial(variant, problem)
    d_q, _, _ = check_gradients(trial, problem, seed=problem.recipe.seed, extra={})
    for row in rows:
        if np.any(d_q[:, :, row] != 0):
            trial.fail(f"dQ of the fully masked row {row} is not exactly 0: largest |dQ| "
                       f"{float(np.abs(d_q[:, :, row]).max()):.3g}", problem)


def _check_regime(variant, regime: regimes.Regime, *, dropout: bool = False) -> None:
    problem = skip_unless_fits(variant, regime)
    extra = _dropout(regime.recipe["seed"]) if dropout else {}
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=extra)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@pytest.mark.parametrize("regime", cases(r for r in regimes.GRADIENTS if not r.long))
def test_gradients_at_length_match_the_oracle_backward(variant, regime):
    """A second key block (n = 513), d = 128, dK and dV summed over GQA groups of 4 and 8, an explicit scale
    (a regime the implementation cannot take is skipped with the reason)."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@pytest.mark.parametrize("regime", cases(r for r in regimes.GRADIENTS if r.long))
def test_long_gradients_match_the_oracle_backward(variant, regime):
    """The same at n = 1025 (long regimes: `tox -e long`, and under --impl), so that a finding only there is
    declared on this property alone."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "causal")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_CAUSAL))
def test_causal_gradients_at_length_in_the_declared_alignment(variant, regime):
    """n_q != n_k, so that the alignment matters: top-left hides the keys past n_q from every row, bottom-right
    leaves the first n_q - n_k rows without a key (their dQ is 0)."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "dropout_seed")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_DROPOUT))
def test_gradients_with_dropout_at_length(variant, regime):
    """Dropout at p = GRADIENT_DROPOUT_P under the regime's seed, the oracle under the same mask."""
    _check_regime(variant, regime, dropout=True)


@checks("fully-masked-rows-zero-gradients")
@pytest.mark.requires("gradients", "mask")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_MASKED))
def test_fully_masked_rows_at_length_have_zero_gradients(variant, regime):
    """The first and last rows and rows 255 and 256 (either side of a 256-row block) see no key."""
    problem = skip_unless_fits(variant, regime)
    check_fully_masked_rows(variant, problem, sorted({0, 255, 256, problem.n_q - 1} & set(range(problem.n_q))))


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "tile_keywords")
@pytest.mark.parametrize("multiple", [pytest.param(1, id="one block +- 1"),
                                      pytest.param(2, id="two blocks +- 1", marks=getattr(pytest.mark, LONG_MARKER))])
def test_gradients_at_default_block_sizes(variant, multiple):
    """The implementation's own block sizes (its keywords' defaults, the path a caller who passes none takes):
    n one past `multiple` times the largest, and causal one short of it."""
    blocks = forward_regimes._default_block_sizes(variant)
    if not blocks:
        pytest.skip("the block-size keywords have no integer defaults")
    n = multiple * max(blocks.values())
    if n + 1 > LONGEST_BLOCK_CASE:
        pytest.skip(f"{multiple} x the default block {max(blocks.values())} + 1 is past {LONGEST_BLOCK_CASE}")
    for length, causal in ((n + 1, False), (n - 1, variant.capabilities.causal)):
        if length >= 1:
            problem = build(n_q=length, n_k=length, d=64, d_v=64, seed=length, causal=causal)
            check_gradients(Trial(variant, problem), problem, seed=length, extra={})
