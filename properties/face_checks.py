"""What the varlen and kv-cache properties share: drawing a dense problem to cut sequences from, and checking one
sequence's output and log-sum-exp against its own dense attention (issue 22)."""

from __future__ import annotations

import inspect

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from harness.api import as_numpy
from harness.api.explain import judge_sequence
from harness.api.perturb import perturbed_sequence
from harness.api.trial import Trial, problems_for
from protocol.registry import Variant
from specs.problems import Problem
from specs.strategies import with_score_mod
from specs.tolerance import ToleranceUndefined, forward_allowance, lse_allowance
from specs.varlen import sequence_kwargs

MODS = ("window_size", "softcap", "alibi_slopes", "sinks")  # the modifications a pack or a cache carries


@st.composite
def source_problems(draw, variant: Variant, face: str, *, max_batch: int, max_n: int) -> Problem:
    """A dense problem to cut sequences from: batch up to max_batch, lengths up to max_n, causal where the
    implementation takes it (rows with no key kept), and one of the modifications its `face` takes, or none (a face
    may take fewer than the dense one: its own signature says which)."""
    caps = variant.capabilities
    causal = caps.causal and draw(st.booleans(), label="causal")
    base = problems_for(variant, causal=causal, empty_rows=True, max_batch=max_batch, max_n=max_n,
                        score_styles=("normal", "integers", "spiky", "large"))
    takes = inspect.signature(variant.impl.face(face)).parameters
    mods = [m for m in MODS if getattr(caps, m) and m in takes]
    keyword = draw(st.sampled_from([None, *mods]), label="modification")
    return draw(with_score_mod(base, keyword) if keyword else base)


def check_sequence(trial: Trial, b: int, got: np.ndarray, lse: object, exact: tuple[np.ndarray, ...], problem: Problem,
                   pack_keys: int | None = None) -> None:
    """Sequence b (dense batch entry b, cut to the keys in `exact`): its output `got` (1, heads, n_q, d_v) within
    the tolerance model of its own dense attention, and its log-sum-exp `lse` (1, heads, n_q; None when not asked)
    equal to the oracle's where that is infinite and within specs.tolerance.lse_allowance elsewhere. A sequence
    with no key has output 0 and log-sum-exp -inf (its sink's). `pack_keys`: the pack's longest sequence of keys,
    for a declared deviation that pads to it."""
    __tracebackhide__ = True
    kwargs = sequence_kwargs(trial.oracle_kwargs(problem), b)
    got, lse = perturbed_sequence(trial, exact, kwargs, got, lse)  # the meta-test's twin (--perturb-declared)
    got, lse = judge_sequence(trial, problem, exact, kwargs, got, lse, pack_keys)  # a declared deviation's 2nd run
    what = f"out of sequence {b}"
    if not exact[1].shape[2]:
        if np.any(got != 0):
            trial.fail(f"sequence {b} has no key, but its output is {got.reshape(-1)[:4]} where it must be 0",
                       problem)
        sinks = kwargs.get("sinks")
        expected = -np.inf if sinks is None else np.asarray(sinks, np.float64)[None, :, None]
        if lse is not None and np.any(np.broadcast_to(expected, got.shape[:3]) != as_numpy(lse)):
            trial.fail(f"sequence {b} has no key, but its log-sum-exp is not {'-inf' if sinks is None else 'its sink'}",
                       problem, details=(f"lse = {as_numpy(lse).reshape(-1)[:4]}",))
        return
    try:
        oracle, allowance = forward_allowance(*exact, dtype=trial.dtype, **kwargs)
    except ToleranceUndefined:
        reject()
    trial.expect_close(got, oracle.out, allowance, what=what, problem=problem)
    if lse is None:
        return
    lse = as_numpy(lse).astype(np.float64)
    infinite = ~np.isfinite(oracle.lse)
    if np.any(infinite & (lse != oracle.lse)):
        trial.fail(f"the log-sum-exp of sequence {b} differs from the oracle's where that is infinite", problem)
    try:
        bound = lse_allowance(*exact, dtype=trial.dtype, oracle=oracle, **kwargs)
    except ToleranceUndefined:
        # the naive log-sum-exp overflows in this dtype: nothing to scale the bound by, so the example is not
        # counted as checked (as the dense log-sum-exp check does); a property that could rarely judge fails
        # Hypothesis's health check instead of passing unchecked
        reject()
    trial.expect_close(np.where(infinite, 0.0, lse), np.where(infinite, 0.0, oracle.lse), bound,
                       what=f"lse of sequence {b}", problem=problem)
