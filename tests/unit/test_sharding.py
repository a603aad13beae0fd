"""specs.sharding: each layout gives every position to exactly one rank, in the order the layout says, and unshard
inverts shard for any n and W, divisible or not; exchanged shards keep their order; and the sharded adapter runs an
even_shards call on the largest group that splits it evenly, one rank where none does (under Triton's interpreter, the
largest whose programs stay within the budget)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.rank_pool import POOL_SIZE
from protocol.registry import Capabilities
from protocol.sharded_adapter import group_size
from specs.sharding import LAYOUTS, chunks, divides_evenly, shard, shard_positions, shards_exchanged, unshard
from specs.validation import AttentionInputError, AttentionShape


def test_contiguous_gives_the_first_ranks_the_longer_chunks():
    assert [p.tolist() for p in shard_positions(7, 3, "contiguous")] == [[0, 1, 2], [3, 4], [5, 6]]


def test_zigzag_gives_rank_r_chunks_r_and_2w_minus_1_minus_r():
    assert [p.tolist() for p in shard_positions(8, 2, "zigzag")] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert [p.tolist() for p in shard_positions(6, 3, "zigzag")] == [[0, 5], [1, 4], [2, 3]]


def test_stripe_deals_the_positions_round_the_ranks():
    assert [p.tolist() for p in shard_positions(7, 3, "stripe")] == [[0, 3, 6], [1, 4], [2, 5]]


def test_fewer_positions_than_ranks_leave_the_last_ranks_empty():
    assert [len(p) for p in shard_positions(2, 4, "contiguous")] == [1, 1, 0, 0]


@given(n=st.integers(0, 40), world=st.integers(1, 5), layout=st.sampled_from(LAYOUTS))
def test_every_position_is_held_once_and_unshard_inverts_shard(n, world, layout):
    held = np.concatenate(shard_positions(n, world, layout))
    assert sorted(held.tolist()) == list(range(n))
    x = np.random.default_rng(n).standard_normal((2, 3, n, 4))
    np.testing.assert_array_equal(unshard(shard(x, world, layout), n, layout), x)
    if divides_evenly(n, world, layout):  # what an even_shards implementation is promised: equal shards
        assert len({len(p) for p in shard_positions(n, world, layout)}) == 1


@given(chunk=st.integers(1, 5), world=st.integers(1, 5), layout=st.sampled_from(LAYOUTS),
       shift=st.integers(-6, 6))
def test_exchanged_shards_hand_each_rank_its_neighbours_shard_in_its_order(chunk, world, layout, shift):
    n = chunk * chunks(0, world, layout)
    x = np.random.default_rng(n).standard_normal((1, 2, n, 3))
    moved = shard(x[:, :, shards_exchanged(n, world, layout, shift)], world, layout)
    for rank, held in enumerate(shard(x, world, layout)):
        np.testing.assert_array_equal(moved[(rank - shift) % world], held)


def test_shards_of_different_lengths_cannot_be_exchanged():
    with pytest.raises(AttentionInputError, match="n=5 does not split into equal zigzag shards on 2 ranks"):
        shards_exchanged(5, 2, "zigzag", 1)

def test_a_rank_returning_the_wrong_number_of_positions_is_named():
    pieces = shard(np.zeros((1, 1, 5, 2)), 2, "contiguous")
    pieces[1] = pieces[1][:, :, :1]
    with pytest.raises(AttentionInputError, match="rank 1 returned 1 positions along axis 2, but holds 2"):
        unshard(pieces, 5, "contiguous")


@pytest.mark.parametrize(("args", "message"), [((4, 2, "diagonal"), "layout must be one of"),
                                               ((4, 0, "zigzag"), "world size must be a positive integer"),
                                               ((-1, 2, "contiguous"), "sequence length must be a non-negative")])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(AttentionInputError, match=message):
        shard_positions(*args)



@pytest.mark.parametrize(("n", "layout", "worlds"), [
    (24, "zigzag", (4, 3, 2)),  # 24 = 8 chunks of 3 = 6 of 4 = 4 of 6
    (12, "zigzag", (3, 2)),  # 12 = 6 chunks of 2 = 4 of 3 (not 8)
    (7, "zigzag", (1,)),  # no group of two or more splits 7 evenly: the whole sequence on one rank
    (7, "contiguous", (1,)),
    (9, "contiguous", (3, 1)),  # one rank where the pool has no three (ATTN_RANKS=2)
])
def test_an_even_shards_call_runs_on_the_largest_group_that_splits_it_evenly(n, layout, worlds):
    caps = Capabilities(faces=("sharded",), sharding=layout, even_shards=True)
    expected = next(w for w in worlds if w <= POOL_SIZE)  # ATTN_RANKS may make the pool smaller
    assert group_size(AttentionShape(1, 4, 4, n, n, 4, 4), caps, None) == expected


@pytest.mark.parametrize(("batch", "n", "expected"), [
    (1, 4, 4),  # a small call: the largest group
    (1024, 4, 2),  # 4 x 4 x 1,024 programs past the budget, 2 x 2 x 1,024 within it (3 does not split 4)
    (2000, 2, 1),  # 2 x 2 x 2,000 past it: one rank
])
def test_an_interpreted_ring_takes_the_largest_group_within_the_program_budget(monkeypatch, batch, n, expected):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ring = Capabilities(faces=("sharded",), even_shards=True, ring_merge=True, max_seq=1024)
    shape = AttentionShape(batch, 1, 1, n, n, 4, 4)
    largest = next(w for w in (4, 3, 2, 1) if w <= POOL_SIZE and n % w == 0)  # without the budget
    assert group_size(shape, ring, None) == min(expected, largest)
    assert group_size(shape, ring, largest) == largest  # an asked group is kept
    compiled = dataclasses.replace(ring, max_seq=None)  # not a record of the interpreter: no budget
    assert group_size(shape, compiled, None) == largest
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert group_size(shape, ring, None) == largest


def test_an_all_to_all_spends_the_same_programs_on_any_group(monkeypatch):
    """Ulysses' ranks each run one step over their share of the heads: 2,000 x 4 programs on any group, as on one."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ulysses = Capabilities(faces=("sharded",), heads_divisible=True, max_seq=1024)
    assert group_size(AttentionShape(2000, 4, 4, 8, 8, 4, 4), ulysses, None) == (4 if POOL_SIZE >= 4 else 2)
