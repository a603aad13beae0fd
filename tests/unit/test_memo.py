"""specs.memo: the oracle and the naive baselines computed once per distinct problem, never served stale or shared
with a caller that writes to what it was given; and forward_allowance through it gives exactly what it computes."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

from specs.memo import Memo, NotContent, content_key, fresh_copy
from specs.problems import build
from specs.tolerance import ToleranceUndefined, forward_allowance, gradient_allowance
from specs.tolerance.gradient_bounds import _gradient_allowance
from specs.tolerance.model import _forward_allowance


def _counted():
    calls = []

    def total(x: np.ndarray, *, shift: float = 0.0) -> dict:
        calls.append(1)
        return {"sum": np.array([x.sum() + shift])}

    return total, calls


def test_equal_content_is_one_key_and_any_change_another():
    a = np.arange(6.0).reshape(2, 3)
    assert content_key(a) == content_key(a.copy()) == content_key(np.asfortranarray(a))
    assert content_key(a) != content_key(a.astype(np.float32))  # the dtype
    assert content_key(a) != content_key(a.reshape(3, 2))  # the shape
    changed = a.copy()
    changed[1, 2] = np.nextafter(changed[1, 2], np.inf)  # one ulp
    assert content_key(a) != content_key(changed)
    assert content_key({"scale": 0.5, "mask": None}) == content_key({"mask": None, "scale": 0.5})
    assert content_key(1) != content_key(1.0) != content_key("1")
    with pytest.raises(NotContent):  # an object's repr may not say all it holds (a long array's is cut short)
        content_key(object())


def test_an_argument_without_a_content_key_is_computed_every_time():
    calls = []
    memo = Memo(lambda x, tag: calls.append(tag) or len(calls))
    assert memo(np.ones(2), object()) == 1 and memo(np.ones(2), object()) == 2 and memo.held_bytes == 0


def test_a_hit_computes_nothing_and_returns_a_copy():
    total, calls = _counted()
    memo = Memo(total)
    x = np.ones(4)
    first = memo(x, shift=1.0)
    first["sum"][0] = -99.0  # the caller writes to what it got
    again = memo(x.copy(), shift=1.0)
    assert again["sum"][0] == 5.0 and len(calls) == 1 and (memo.hits, memo.misses) == (1, 1)
    x[0] = 10.0  # the caller writes to its own input: a new content, a new key
    assert memo(x, shift=1.0)["sum"][0] == 14.0 and len(calls) == 2
    assert memo(np.ones(4), shift=2.0)["sum"][0] == 6.0 and len(calls) == 3


def test_a_remembered_exception_is_raised_again_without_computing():
    calls = []

    def undefined(x):
        calls.append(1)
        raise ToleranceUndefined("the naive float16 formula overflows on this input")

    memo = Memo(undefined, raised=(ToleranceUndefined,))
    for _ in range(2):
        with pytest.raises(ToleranceUndefined, match="overflows"):
            memo(np.ones(2))
    assert len(calls) == 1
    other = Memo(lambda x: 1 / 0)  # not named as an answer: raised, never remembered
    with pytest.raises(ZeroDivisionError):
        other(np.ones(2))
    assert other.held_bytes == 0 and other.misses == 1


def test_the_memory_keeps_to_its_budget_least_recently_used_first():
    total, calls = _counted()
    memo = Memo(total, budget_bytes=2 * 8)  # two results of one float64 each
    for value in (1.0, 2.0, 1.0, 3.0):  # 1.0 used again, so 2.0 is the one to go
        memo(np.full(2, value))
    assert memo.held_bytes == 16 and len(calls) == 3
    memo(np.full(2, 1.0))
    assert len(calls) == 3  # still held
    memo(np.full(2, 2.0))
    assert len(calls) == 4  # was evicted
    with pytest.raises(ValueError, match="budget"):
        Memo(total, budget_bytes=-1)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_forward_allowance_through_the_memory_is_what_it_computes(dtype):
    p = build(n_q=5, n_k=7, d=4, seed=3, causal=True)
    exact = tuple(x.astype(dtype).astype(np.float64) for x in (p.q, p.k, p.v))
    kwargs = dict(p.kwargs(), causal_alignment="bottom_right")
    computed = _forward_allowance(*exact, dtype, False, kwargs)
    for _ in range(2):  # a miss, then a hit
        oracle, allowance = forward_allowance(*exact, dtype=dtype, **kwargs)
        assert np.array_equal(oracle.out, computed[0].out) and np.array_equal(allowance.bound, computed[1].bound)
        assert [name for name, _ in allowance.terms] == [name for name, _ in computed[1].terms]
        oracle.out[...] = np.nan  # a caller that writes to its oracle poisons nothing


def test_an_overflowing_baseline_stays_undefined_through_the_memory():
    q = k = np.full((1, 1, 2, 2), 250.0)  # scores 250^2 * 2 / sqrt(2) ~ 88000, past float16's 65504
    for _ in range(2):
        with pytest.raises(ToleranceUndefined, match="overflows"):
            forward_allowance(q, k, np.ones((1, 1, 2, 2)), dtype="float16")


def test_gradient_allowance_through_the_memory_is_what_it_computes():
    p = build(n_q=4, n_k=6, d=3, seed=2)
    d_out = np.random.default_rng(0).standard_normal(p.q.shape[:3] + p.v.shape[-1:])
    exact = tuple(x.astype(np.float16).astype(np.float64) for x in (p.q, p.k, p.v, d_out))
    computed = _gradient_allowance(*exact, "float16", p.kwargs())
    for _ in range(2):
        got = gradient_allowance(*exact, dtype="float16", **p.kwargs())
        assert all(np.array_equal(a, b) for a, b in zip(got.grads, computed.grads, strict=True))
        assert all(np.array_equal(a.bound, b.bound) for a, b in zip(got.allowances, computed.allowances, strict=True))
        got.grads[0][...] = np.nan


class _Pair(NamedTuple):
    first: np.ndarray
    second: float


@dataclasses.dataclass(frozen=True)
class _Result:
    out: np.ndarray
    parts: tuple
    extra: dict


def test_a_fresh_copy_shares_no_array_with_what_was_stored():
    """What a hit returns (fresh_copy): equal to what was stored, every array its own, whatever holds it."""
    stored = _Result(np.arange(3.0), (_Pair(np.ones(2), 0.5), [np.zeros(1)]), {"lse": np.full(2, -np.inf)})
    fresh = fresh_copy(stored)
    assert type(fresh) is _Result and type(fresh.parts[0]) is _Pair and fresh.parts[0].second == 0.5
    for got, kept in ((fresh.out, stored.out), (fresh.parts[0].first, stored.parts[0].first),
                      (fresh.parts[1][0], stored.parts[1][0]), (fresh.extra["lse"], stored.extra["lse"])):
        assert np.array_equal(got, kept) and not np.shares_memory(got, kept)
