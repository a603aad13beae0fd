"""The deviations that read ring-flash-attn's blocks (specs.deviations.ring_steps) from a sharded call's group size and
layout: flash-attn's NaN at a scale of 0 or below on the keys padding a block's last tile (ring_steps), the NaN dQ
share of such a block where the weights overflow, which the backward's buffer puts on other rows too, and its
assertion on an empty block (raises-on-empty-ring-block), and its backward's failure on one rank
(backward-fails-on-one-rank). The rows and ranks expected here are worked out by hand from
the library's three forwards (the comments), not by the schedule under test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specs.deviations import Call, DeviationError, deviation_from_fields
from specs.deviations.ring_steps import LAYOUT, WORLD_SIZE, rank_dq, rank_steps
from specs.problems import build


def _call(n: int, *, world: int | None = None, layout: str = "contiguous", **keywords) -> Call:
    problem = build(batch=1, heads=2, n_q=n, n_k=n, d=2, d_v=2, seed=7)
    tiles = {} if world is None else {WORLD_SIZE: world, LAYOUT: layout}
    return Call(problem.q, problem.k, problem.v, keywords, tiles=tiles)


def _nan_rows(block_n: int, call: Call, ring_steps: bool = True) -> list[int]:
    fields = {"block_n": block_n, **({"ring_steps": True} if ring_steps else {})}
    deviation = deviation_from_fields("padded-keys-nan-at-nonpositive-scale", fields, "test")
    predicted = deviation.non_finite(call)
    if not predicted:
        return []
    rows = predicted["lse"]
    assert (predicted["out"] == rows[..., None]).all() and (rows == rows[:1, :1]).all()  # whole rows, every head
    return [int(i) for i in np.flatnonzero(rows[0, 0])]


@pytest.mark.parametrize(("n", "world", "layout", "causal", "block_n", "expected"), [
    # ring, 2 ranks of 3: rank 0 runs only its own block, masked; rank 1 also rank 0's 3 keys without the mask
    (6, 2, "contiguous", True, 4, [3, 4, 5]),
    (6, 2, "contiguous", False, 4, [0, 1, 2, 3, 4, 5]),  # every block unmasked, 3 keys each
    (8, 2, "contiguous", False, 8, list(range(8))),  # blocks of 4 keys pad a tile of 8, though n_k = 8 does not
    (8, 2, "contiguous", False, 4, []),
    # zigzag, 2 ranks: rank 0 holds 0 1 6 7, rank 1 holds 2 3 4 5; rank 0's later step takes its second half (6 7)
    # against rank 1's 4 keys, rank 1's the first half of rank 0's keys (0 1) for every row; both unmasked
    (8, 2, "zigzag", True, 8, [2, 3, 4, 5, 6, 7]),
    (8, 2, "zigzag", True, 4, [2, 3, 4, 5]),
    (12, 3, "stripe", True, 64, []),  # every stripe block is masked
    (12, 3, "stripe", False, 64, list(range(12))),  # without causal the library's ring runs, unmasked
])
def test_nan_rows_follow_the_ring_s_unmasked_blocks(n, world, layout, causal, block_n, expected):
    assert _nan_rows(block_n, _call(n, world=world, layout=layout, causal=causal, scale=0.0)) == expected


def test_ring_steps_predict_nothing_at_a_positive_scale_and_read_a_dense_call_whole():
    assert _nan_rows(4, _call(6, world=2, scale=1e-30)) == [] and _nan_rows(4, _call(6, world=2)) == []
    assert _nan_rows(4, _call(6, world=2, scale=-2.0)) == list(range(6))
    assert _nan_rows(4, _call(6, scale=-0.0)) == list(range(6))  # no group: one kernel call on all 6 keys
    assert _nan_rows(8, _call(8, world=2, scale=0.0), ring_steps=False) == []  # declared without: n_k alone


def _overflowing_dq_rows(n: int, world: int, layout: str, dtype: str, causal: bool = True) -> list[int]:
    """padded-keys-weight-overflow's NaN rows of dQ where every score is -100 (every row's log-sum-exp below -88.72:
    a block's share is NaN wherever its kernel call pads its keys)."""
    q, k = np.full((1, 1, n, 4), -10.0), np.full((1, 1, n, 4), 5.0)
    ones = np.ones((1, 1, n, 4))
    call = Call(q, k, ones, {"causal": True} if causal else {}, dtype, d_out=ones,
                tiles={WORLD_SIZE: world, LAYOUT: layout})
    deviation = deviation_from_fields("padded-keys-weight-overflow", {"block_n": 8, "ring_steps": True}, "test")
    rows = deviation.non_finite_gradients(call).get("dq", np.zeros(q.shape, dtype=bool))
    assert (rows == rows[..., :1]).all()
    return [int(i) for i in np.flatnonzero(rows[0, 0, :, 0])]


@pytest.mark.parametrize(("n", "world", "layout", "dtype", "expected"), [
    # zigzag, 2 ranks: rank 0 (0 1 6 7) takes rank 1's 4 keys for its second half (6 7), writing the NaN share to
    # its buffer's first half and adding it to dq's second half; float16's dq is a copy of the first buffer, so
    # only 6 7; float32's is the buffer itself, whose first half (0 1) now holds the NaN share too. Rank 1 (2 3 4 5)
    # takes rank 0's first half (0 1) for every row: all NaN either way
    (8, 2, "zigzag", "float16", [2, 3, 4, 5, 6, 7]),
    (8, 2, "zigzag", "float32", list(range(8))),
    # the ring: rank 1's second block is written to every row and added to every row: the same for both
    (6, 2, "contiguous", "float16", [3, 4, 5]),
    (6, 2, "contiguous", "float32", [3, 4, 5]),
])
def test_a_nan_dq_share_lands_where_the_backward_s_buffer_puts_it(n, world, layout, dtype, expected):
    assert _overflowing_dq_rows(n, world, layout, dtype) == expected


def test_an_aliased_nan_share_a_later_share_overwrites_is_gone_and_a_copied_one_stays():
    """rank_dq on one rank of the ring (every step over every row): a NaN first share is gone from float32's dq,
    which the next share overwrites, and stays in a copy's, which the next share is added to."""
    steps = rank_steps("contiguous", False, 0, 2, (np.arange(2), np.arange(2, 4)), 2)
    shares = [np.full((1, 2, 1), np.nan), np.ones((1, 2, 1))]
    assert np.all(rank_dq(steps, shares, 2, aliased=True) == 2.0)  # the second share, twice
    assert np.all(np.isnan(rank_dq(steps, shares, 2, aliased=False)))


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_ring_steps_is_true_or_false(value):
    with pytest.raises(DeviationError, match="ring_steps is true or false"):
        deviation_from_fields("padded-keys-nan-at-nonpositive-scale", {"block_n": 64, "ring_steps": value}, "test")


def _explains(error: str, n: int, world: int | None, layout: str = "stripe", causal: bool = True,
              raises: str = "AssertionError") -> bool:
    deviation = deviation_from_fields("raises-on-empty-ring-block", {"raises": raises}, "test")
    return deviation.explains_raise(_call(n, world=world, layout=layout, causal=causal), error)


@pytest.mark.parametrize(("error", "n", "world", "expected"), [
    # stripe, one position a rank: a rank r runs the steps after its own (r < W - 1) on its rows but the first: none
    ("AssertionError:  (rank 0)", 2, 2, True),
    ("AssertionError:  (rank 1)", 2, 2, False),  # the last rank has no later step
    ("AssertionError: ", 2, 2, True),  # no rank named
    ("AssertionError:  (rank 1)", 3, 3, True),
    ("AssertionError:  (rank 2)", 3, 3, False),
    ("AssertionError:  (rank 0)", 4, 2, False),  # two positions a rank: no block is empty
    ("ValueError: empty (rank 0)", 2, 2, False),  # another type
    ("AssertionError:  (rank 0)", 2, None, False),  # no group on the call
])
def test_an_empty_stripe_block_explains_its_rank_s_error_of_the_declared_type(error, n, world, expected):
    assert _explains(error, n, world) is expected


@pytest.mark.parametrize(("layout", "causal"), [("contiguous", True), ("zigzag", True), ("stripe", False)])
def test_the_ring_and_zigzag_blocks_are_never_empty_at_one_position_a_rank(layout, causal):
    """The ring's blocks are whole shards; zigzag's halves of two positions hold one each; without causal the stripe
    record runs the ring."""
    n = 4 if layout == "zigzag" else 2
    assert not _explains("AssertionError:  (rank 0)", n, 2, layout=layout, causal=causal)


def test_raises_names_an_exception_type():
    with pytest.raises(DeviationError, match="`raises` names the exception's type"):
        deviation_from_fields("raises-on-empty-ring-block", {"raises": "an assertion"}, "test")


@pytest.mark.parametrize(("error", "n", "world", "layout", "causal", "backward", "expected"), [
    ("RuntimeError: Pair is not connected (rank 0)", 4, 1, "contiguous", False, True, True),  # the send to itself
    ("RuntimeError: Pair is not connected (rank 0)", 2, 1, "zigzag", True, True, True),  # halves of one position each
    ("IndexError: tuple index out of range (rank 0)", 1, 1, "zigzag", True, True, True),  # dout.chunk(2)[1] of one
    ("RuntimeError: Pair is not connected (rank 0)", 1, 1, "zigzag", True, True, False),  # the halving fails first
    ("IndexError: tuple index out of range (rank 0)", 2, 1, "zigzag", True, True, False),  # two positions halve
    ("IndexError: tuple index out of range (rank 0)", 1, 1, "zigzag", False, True, False),  # the ring's backward
    ("RuntimeError: Pair is not connected (rank 0)", 4, 2, "contiguous", False, True, False),  # two ranks
    ("RuntimeError: Pair is not connected (rank 0)", 4, 1, "contiguous", False, False, False),  # a forward
    ("RuntimeError: Pair is not connected", 4, None, "contiguous", False, True, False),  # not a sharded call
])
def test_a_one_rank_backward_explains_the_error_its_first_failing_step_raises(error, n, world, layout, causal,
                                                                            backward, expected):
    call = _call(n, world=world, layout=layout, causal=causal)
    if backward:
        call = dataclasses.replace(call, d_out=np.ones(call.q.shape))
    deviation = deviation_from_fields("backward-fails-on-one-rank", {}, "test")
    assert deviation.explains_raise(call, error) is expected
