"""A call is a function of its inputs (CONTRACT 1): repeated calls return bitwise equal outputs, without
dropout and, where the implementation takes dropout_seed, with the same seed."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from harness.trial import Trial, problems_for


@checks("deterministic")
@given(data=st.data())
def test_repeated_calls_are_bitwise_equal(variant, data):
    caps = variant.capabilities
    problem = data.draw(problems_for(variant, max_n=40, max_d=32), label="problem")
    extra = {}
    if caps.dropout_seed and data.draw(st.booleans(), label="dropout"):
        extra = dict(dropout_p=0.3, dropout_seed=data.draw(st.integers(0, 2**32 - 1), label="dropout_seed"))
    trial = Trial(variant, problem)
    first, second = (trial.check_output(trial.call_raw(problem, **extra), problem, finite=False)
                     for _ in range(2))
    same = (first == second) | (np.isnan(first) & np.isnan(second))
    if not same.all():
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        trial.fail(f"two calls on the same inputs{' and seed' if extra else ''} differ at out{list(where)}: "
                   f"{first[where]!r} then {second[where]!r} ({int((~same).sum())} elements differ)", problem,
                   call_line=f"out = fn(q, k, v, **p.kwargs(), **{extra!r}); again = fn(q, k, v, **p.kwargs(), "
                             f"**{extra!r})")
