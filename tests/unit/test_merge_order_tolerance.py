"""specs.tolerance.merge_order_allowance (claim ring-merge-order-free): a ring's pairwise logaddexp merge of the same
blocks' partial results in two orders stays within the allowance, over every score and value style in float64,
float32, float16 and bfloat16 (accumulating in float32 below float64, as the ring records do), its merge term under
half; a merge that does not rescale the running output (zoo/wrong_sharded.py:ring_merge_unrescaled's mistake)
exceeds it a thousandfold on ordinary inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, reject
from hypothesis import strategies as st

from protocol.registry import Capabilities
from specs.dtypes import accumulator, numpy_dtype
from specs.problems import build
from specs.reference import attention
from specs.sharding import shard_positions
from specs.strategies import problems
from specs.tolerance import merge_order_allowance

SAME_HEADS = Capabilities(gqa=False)


def _partials(q, k, v, world: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each contiguous key shard's (out_b, lse_b), computed in the accumulator dtype."""
    inner = accumulator(q.dtype).type
    q_, k_, v_ = (x.astype(inner) for x in (q, k, v))
    scale = inner(1 / np.sqrt(q.shape[-1]))
    partials = []
    for keys in shard_positions(k.shape[2], world, "contiguous"):
        scores = q_ @ k_[:, :, keys].swapaxes(-1, -2) * scale
        top = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - top)
        total = e.sum(axis=-1, keepdims=True)
        partials.append(((e @ v_[:, :, keys]) / total, (top + np.log(total))[..., 0]))
    return partials


def _ring_merge(partials, order, *, rescaled: bool = True) -> np.ndarray:
    """The blocks merged one at a time in `order`, as impls/distributed/ring.py's RingPlan.merge does."""
    out, lse = np.zeros_like(partials[0][0]), np.full_like(partials[0][1], -np.inf)
    for b in order:
        out_b, lse_b = partials[b]
        merged = np.logaddexp(lse, lse_b)
        kept = np.exp(lse - merged)[..., None] if rescaled else 1.0
        out, lse = kept * out + np.exp(lse_b - merged)[..., None] * out_b, merged
    return out


@given(dtype=st.sampled_from(["float64", "float32", "float16", "bfloat16"]), world=st.integers(2, 4),
       shift=st.integers(1, 3), data=st.data())
def test_a_correct_merge_in_two_orders_uses_under_half_the_allowance(dtype, world, shift, data):
    problem = data.draw(problems(caps=SAME_HEADS, dtype=dtype, scale=False, min_n=world, max_n=64), label="problem")
    with np.errstate(over="ignore"):
        q, k, v = (x.astype(numpy_dtype(dtype)) for x in (problem.q, problem.k, problem.v))
    if not all(np.isfinite(x).all() for x in (q, k, v)):
        reject()
    partials = _partials(q, k, v, world)
    first, second = (_ring_merge(partials, np.roll(np.arange(world), s)).astype(q.dtype).astype(np.float64)
                     for s in (0, shift))
    exact = attention(*(x.astype(np.float64) for x in (q, k, v)))
    allowance = merge_order_allowance(exact, v.astype(np.float64), dtype, merges=world)
    # the outputs' own rounding is no worst case but exact: two values either side of a rounding boundary just
    # above a power of two round one ulp = 2u|O| apart, so that term may be used in full; the rest by half at most
    terms = dict(allowance.terms)
    rest = np.maximum(np.abs(first - second) - terms["output rounding"], 0.0)
    assert np.all(rest <= 0.5 * (allowance.bound - terms["output rounding"])), np.max(rest / allowance.bound)


def test_a_merge_that_does_not_rescale_the_running_output_exceeds_it():
    p = build(n_q=4, n_k=8, d=4, seed=3)
    q, k, v = (x.astype(np.float32) for x in (p.q, p.k, p.v))
    partials = _partials(q, k, v, 2)
    first, second = (_ring_merge(partials, order, rescaled=False) for order in ([0, 1], [1, 0]))
    allowance = merge_order_allowance(attention(p.q, p.k, p.v), p.v, "float32", merges=2)
    assert np.max(np.abs(first - second) / allowance.bound) > 1e3
