"""Attention sharded across processes (beyond the seeds: context parallelism; seed 000 § Flash Attention's tiled
output equals the global output, a tile per process).

Every dense property already reaches a sharded implementation through its adapter (protocol.sharded_adapter), on
the largest group its lengths fill; these ask for each group size W = 2, 3, 4 in turn, lengths not divisible by W
among them, and check the output, the log-sum-exp and the gradients gathered from the ranks against the global
oracle; that a ring's merge does not depend on the order its blocks arrive in beyond the merge's rounding; and that
an implementation which splits the heads refuses, by name, heads that do not divide.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, check_out_and_lse_against_oracle, problems_for
from properties.gradient_checks import check_gradients
from properties.sharded_checks import cut_to_equal_shards, merge_order_comparison
from protocol.rank_pool import POOL_SIZE
from specs.derivations import heads_tiled
from specs.sharding import WORLD_SIZES, chunks

SMALL = dict(max_n=24, max_d=8)
WORLDS = tuple(world for world in WORLD_SIZES if world <= POOL_SIZE)  # a smaller pool (ATTN_RANKS) runs fewer


def _sharded_problem(variant, world: int, data):
    """A problem for W = `world`: causal or not, lengths from W (no rank empty) up, divisible only where the
    implementation needs it, heads made divisible where it splits them."""
    caps = variant.capabilities
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    shortest = chunks(0, world, caps.sharding) if caps.even_shards else world
    problem = data.draw(problems_for(variant, causal=causal, min_n=shortest, **SMALL), label="problem")
    if caps.heads_divisible and problem.q.shape[1] % world:  # W copies of the heads divide among W ranks
        problem = problem.derive(heads_tiled, world, not caps.gqa)
    if caps.even_shards:
        problem = cut_to_equal_shards(problem, world, caps.sharding, queries=True)
    return problem


@checks("sharded-equals-global")
@pytest.mark.requires("sharded")
@pytest.mark.parametrize("world", WORLDS)
@given(data=st.data())
def test_sharded_output_and_lse_equal_the_global_ones(variant, world, data):
    problem = _sharded_problem(variant, world, data)
    check = check_out_and_lse_against_oracle if variant.capabilities.lse else check_against_oracle
    check(variant, problem, world_size=world)


@checks("sharded-equals-global")
@pytest.mark.requires("sharded", "gradients")
@pytest.mark.parametrize("world", WORLDS)
@given(data=st.data())
def test_sharded_gradients_equal_the_global_ones(variant, world, data):
    problem = _sharded_problem(variant, world, data)
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra={"world_size": world})


@checks("ring-merge-order-free")
@pytest.mark.requires("sharded")
@pytest.mark.parametrize("world", WORLDS)
@given(data=st.data())
def test_a_ring_merges_the_same_blocks_alike_in_any_order(variant, world, data):
    """Keys whose shards are exchanged among the ranks (non-causal, no modification: nothing depends on where a
    key sits) give every rank the same blocks in another order: only the merge's rounding may differ."""
    caps = variant.capabilities
    if not caps.ring_merge:
        pytest.skip("the implementation does not declare a ring's log-sum-exp merge (ring_merge=False)")
    problem = data.draw(problems_for(variant, min_n=chunks(0, world, caps.sharding), **SMALL), label="problem")
    problem = cut_to_equal_shards(problem, world, caps.sharding, queries=caps.even_shards or not caps.cross)
    check_merge_order_free(variant, problem, world, data.draw(st.integers(1, world - 1), label="shards shifted by"))


@reproducible
def check_merge_order_free(variant, problem, world: int, shift: int) -> None:
    """The output with the key shards moved `shift` ranks on equals the output in the ring's own order, within the
    merge's rounding (properties.sharded_checks.merge_order_comparison)."""
    got, expected, allowance = merge_order_comparison(variant, problem, world=world, shift=shift)
    Trial(variant, problem).expect_close(got, expected, allowance, what=f"out (key shards moved {shift} ranks on)",
                                         versus="out with the blocks in the ring's own order")


@checks("sharded-refuses-what-its-layout-cannot-split")
@pytest.mark.requires("sharded")
@given(data=st.data())
def test_heads_that_do_not_divide_among_the_ranks_are_refused_by_name(variant, data):
    """Lengths the layout splits into equal shards where the implementation needs them (even_shards): otherwise the
    call is refused for its lengths, before its heads are read."""
    caps = variant.capabilities
    if not caps.heads_divisible:
        pytest.skip("the implementation does not split the heads among the ranks (heads_divisible=False)")
    world = data.draw(st.sampled_from(WORLDS), label="world")
    shortest = chunks(0, world, caps.sharding) if caps.even_shards else world
    problem = data.draw(problems_for(variant, min_n=shortest, **SMALL), label="problem")
    assume(problem.q.shape[1] % world)
    if caps.even_shards:
        problem = cut_to_equal_shards(problem, world, caps.sharding, queries=True)
    trial = Trial(variant, problem)
    summary = trial.expect_raised(problem, f"{problem.q.shape[1]} heads on {world} ranks", world_size=world)
    if "heads" not in summary:
        trial.fail(f"refused {problem.q.shape[1]} heads on {world} ranks without naming the heads: {summary}",
                   problem)
