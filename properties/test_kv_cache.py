"""KV caches beyond the seeds (issue 22, specs.kv_cache): a decode step appends to a cache, then attends over it.

Every dense property already reaches a kv-cache implementation through the adapter (protocol.dense_adapters);
these check the face itself: sequences of unequal cached lengths (0 included) with left padding, cache rows picked
by cache_batch_idx, paged caches of 1, 16 and 256 slots a page in shuffled order, NaN in every slot and page no
sequence uses, every num_splits from 1 to 16, and block tables outside the cache.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import names
from harness.api.face_calls import call_face, expect_face_raised, face_output
from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from properties.face_checks import check_sequence, source_problems
from properties.kv_cache_plans import cache_plans
from specs.kv_cache import CacheInputs, build_cache
from specs.problems import Problem, build
from specs.varlen import to_dense


@reproducible
def check_decode_step(trial: Trial, plan: dict, extra: dict) -> None:
    """One kv-cache call on the trial's problem laid out by `plan`: every sequence's output (and log-sum-exp)
    against its own dense attention over its slots after the append, and the caches bit for bit as the append
    leaves them."""
    __tracebackhide__ = True
    variant, problem = trial.variant, trial.problem
    caps = variant.capabilities
    cache: CacheInputs = build_cache(*trial.inputs(), **plan)
    expected = cache.expected_caches()
    extra = {**extra, **({"return_lse": True} if caps.lse else {})}
    raw = call_face(trial, "kvcache", cache.arrays, {**cache.keywords, **problem.handed(variant.dtype).kwargs(),
                                                     **extra}, problem)
    out_raw, lse = raw if caps.lse else (raw, None)
    batch, heads, n_q, _ = problem.q.shape
    out = face_output(trial, out_raw, (batch, n_q, heads, problem.v.shape[-1]), problem)
    if lse is not None and tuple(lse.shape) != (batch, heads, n_q):
        trial.fail(f"return_lse=True returned lse of shape {tuple(lse.shape)}, expected (batch, heads, n_q)",
                   problem)
    for name, got, want in (("k_cache", cache.k_cache, expected[0]), ("v_cache", cache.v_cache, expected[1])):
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if not same.all():
            at = tuple(int(i) for i in np.argwhere(~same)[0])
            trial.fail(f"{name}{list(at)} is {got[at]!r} after the call, expected {want[at]!r}: the new keys belong "
                       f"at slots cache_seqlens.. of their sequence and nothing else may change", problem)
    exact_q = trial.exact_inputs()[0]
    caches = [c.astype(np.float64) for c in expected]
    for b in range(batch):
        where = cache.layout.where(b, cache.layout.slots(b))
        keys, values = (to_dense(c[where]) for c in caches)
        check_sequence(trial, b, out[b].swapaxes(0, 1)[None], None if lse is None else lse[b:b + 1],
                       (exact_q[b:b + 1], keys, values), problem)


@checks("kv-cache-appends-then-attends")
@pytest.mark.requires("kvcache")
@given(data=st.data())
def test_decode_step_appends_then_attends(variant, data):
    problem = data.draw(source_problems(variant, "kvcache", max_batch=6, max_n=40), label="problem")
    plan = data.draw(cache_plans(variant, problem), label="cache")
    splits = {"num_splits": data.draw(st.integers(1, 16), label="num_splits")} if variant.capabilities.num_splits \
        else {}
    check_decode_step(Trial(variant, problem), plan, splits)


@checks("num-splits-leave-attention-unchanged")
@pytest.mark.requires("kvcache", "num_splits")
@given(data=st.data())
def test_every_num_splits_gives_the_same_attention(variant, data):
    problem = data.draw(source_problems(variant, "kvcache", max_batch=3, max_n=40), label="problem")
    plan = data.draw(cache_plans(variant, problem), label="cache")
    trial = Trial(variant, problem)
    for splits in (1, *data.draw(st.lists(st.integers(2, 16), min_size=1, max_size=3, unique=True),
                                 label="num_splits")):
        check_decode_step(trial, plan, {"num_splits": splits})


@checks("kv-cache-appends-then-attends")
@pytest.mark.requires("kvcache")
def test_caches_outside_the_protocol_raise_errors_naming_them(variant):
    problem = build(batch=2, heads=2, heads_kv=1, n_q=2, n_k=6, d=8, d_v=8, seed=22)
    for what in BAD_CACHES if variant.capabilities.block_table else BAD_CACHES[:1]:
        check_bad_cache_refused(variant, problem, what)


# what is wrong with a cache (the argument its error must name)
BAD_CACHES = ("cache_seqlens past the cache's slots", "a block_table entry past the cache's pages for a page the "
              "sequence uses")


@reproducible
def check_bad_cache_refused(variant, problem: Problem, what: str) -> None:
    """The cache of `problem` (two sequences of 6 and 3 cached keys, paged where the implementation takes a block
    table) broken as `what` says: the kv-cache call raises, naming the argument."""
    caps = variant.capabilities
    trial = Trial(variant, problem)
    plan = dict(lengths_k=[6, 3], n_new=1, page_size=2) if caps.block_table else dict(lengths_k=[6, 3], n_new=1)
    cache = build_cache(*trial.inputs(), **plan)
    if what == BAD_CACHES[0]:
        name, keywords = "cache_seqlens", dict(cache.keywords, cache_seqlens=np.array([40, 2], np.int32))
    else:
        table = cache.keywords["block_table"].copy()
        table[1, 0] = len(cache.k_cache) + 3
        name, keywords = "block_table", dict(cache.keywords, block_table=table)
    broken: CacheInputs = replace(cache, keywords=keywords)
    fresh = [x if x is None else x.copy() for x in broken.arrays]
    summary = expect_face_raised(trial, "kvcache", tuple(fresh), keywords, problem, what)
    if not names(summary, name):
        trial.fail(f"{what} raised an error that does not name {name}: {summary}", problem)
