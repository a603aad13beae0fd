"""The problem strategies reach past tile sizes and across magnitudes (DESIGN.md, Hypothesis profiles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, settings

from impls.registry import Capabilities
from specs.problems import SCORE_STYLES
from specs.strategies import problems

SEARCH = settings(max_examples=2000, database=None)


@pytest.mark.parametrize("description, predicate", [
    ("n = 1", lambda p: p.n_q == 1),
    ("n_q != n_k", lambda p: p.n_q != p.n_k),
    ("n just above 16", lambda p: p.n_k == 17),
    ("n just above 32", lambda p: p.n_q == 33),
    ("n just above 64", lambda p: p.n_k == 65),
    ("n just above 128", lambda p: p.n_q == 129),
    ("odd n above 100", lambda p: p.n_k > 100 and p.n_k % 2),
    ("d not a power of two", lambda p: p.q.shape[-1] in (3, 5, 33, 65)),
    ("d_v != d", lambda p: p.v.shape[-1] != p.q.shape[-1]),
    ("grouped kv heads", lambda p: p.q.shape[1] > p.k.shape[1] > 1),
    ("multi-query", lambda p: p.q.shape[1] > 1 and p.k.shape[1] == 1),
    ("scores above 1e3", lambda p: np.abs(p.q[..., 0, :] @ p.k[..., 0, :].swapaxes(-1, -2)).max() > 1e3),
    ("an explicit scale", lambda p: p.scale is not None),
])
def test_strategy_reaches(description, predicate):
    find(problems(), predicate, settings=SEARCH)


@pytest.mark.parametrize("style", SCORE_STYLES)
def test_every_score_style_is_drawn(style):
    find(problems(), lambda p: p.recipe.score_style == style, settings=SEARCH)


def test_capabilities_are_respected():
    caps = Capabilities(gqa=False, cross=False, value_dim=False)
    for p in [find(problems(caps=caps), lambda p, n=n: p.n_q >= n, settings=SEARCH) for n in (1, 20, 60)]:
        assert p.q.shape[1] == p.k.shape[1] and p.n_q == p.n_k and p.v.shape[-1] == p.q.shape[-1]


def test_float16_problems_stay_representable():
    p = find(problems(dtype="float16"), lambda p: p.recipe.score_style == "large", settings=SEARCH)
    assert p.recipe.value_style != "large" and np.all(np.isfinite(p.v.astype(np.float16)))
