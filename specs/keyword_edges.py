"""The edges of each keyword of the protocol (docs/design.md, CONTRACT 1), as Hypothesis strategies.

specs.strategies draws keywords from their typical values; a declared keyword is a promise over its whole
domain, and implementations break at its edges. Each edge is an `Edge`: the keyword, what the edge is, and the
value (written as Python by specs.literals for the failure message); the problem called with it is derived by a
step of specs.derivations, so the repro snippet prints that call.

- scale (resolve_scale in specs.validation: any finite real, a Python int or float, a NumPy scalar, a 0-d
  array): 0 (every visible key weighs the same), negative (the ranking reversed), subnormal, huge (scores far
  beyond exp's range: one-hot weights; a lower precision whose naive formula overflows is left to the
  tolerance model, which rejects the input), and its types.
- mask (check_mask: boolean only, so a uint8 mask is outside the protocol and is not drawn; the oracle's
  rejection of it is tested in tests/suite_run/test_keyword_edges.py): every key hidden, none, one key hidden, one key
  visible, broadcast from rank 1 (keys), 2 (queries x keys), 3 and 4, size-1 dimensions included.
- dropout_p (specs.dropout_mask.check_dropout: 0 <= p < 1): 0, and rates close to 1.
- lse: rows that see no key (-inf), and rows whose scores are all huge, all hugely negative or all tiny.
- the score modifications (specs.score_mods.check_score_mods): values outside the protocol, which an
  implementation must reject with an error naming the keyword (BAD_SCORE_MODS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from specs.derivations import BAD_SCORE_MOD_VALUES, scores_of_one_sign, with_keywords, with_mask_pattern
from specs.literals import literal_code
from specs.problems import Problem, queries_scaled


@dataclass(frozen=True)
class Edge:
    """One edge value of one keyword; a mask edge also keeps its pattern, shape and row keys (with_mask_pattern's
    arguments), from which its value is made."""

    keyword: str
    label: str
    value: object
    pattern: tuple = ()

    def describe(self) -> str:
        """What a failure message names: the keyword, the value as Python, and the edge."""
        shown = (f"with_mask_pattern(p, {', '.join(literal_code(arg) for arg in self.pattern)})" if self.pattern
                 else literal_code(self.value))
        return f"{self.keyword}={shown} ({self.label})"


SCALE_VALUES = tuple(Edge("scale", label, value) for label, value in (
    ("zero: uniform weights over the visible keys", 0.0),
    ("negative: the ranking reversed", -1.0),
    ("negative: the ranking reversed", -0.125),
    ("negative and huge: one-hot on the lowest score", -1e6),
    ("subnormal in float64", 5e-324),
    ("subnormal in float64", 1e-310),
    ("subnormal in float32", 1e-40),
    ("subnormal in float16", 3e-08),
    ("huge: one-hot weights", 1e4),
    ("huge: one-hot weights", 1e6),
    ("huge: one-hot weights", 1e9),
))
# The types a scale may come as, each checked on one fixed problem (the type, not the problem, is the edge)
SCALE_TYPES = tuple(Edge("scale", label, value) for label, value in (
    ("a Python int", 0),
    ("a Python int", 1),
    ("a Python int", -2),
    ("a NumPy scalar", np.float64(0.5)),
    ("a NumPy scalar", np.float32(-0.25)),
    ("a NumPy scalar", np.float16(0.0)),
    ("a NumPy scalar", np.int64(3)),
    ("a 0-d array", np.array(0.5)),
    ("a 0-d array", np.array(-1.0, dtype=np.float32)),
    ("a 0-d array", np.array(0.0)),
    ("a 0-d array", np.array(2)),
))
DROPOUT_EDGES = (0.0, 0.9, 0.99, 0.999)  # 0: bitwise the call without dropout; the rest: survivors x 1/(1 - p)
MASK_PATTERNS = ("hides nothing", "hides every key", "hides one key per row", "shows one key per row")
MASK_RANKS = (1, 2, 3, 4)
# What a step does to q and k so that every score of a row shares a magnitude (the LSE edges): the label, then the
# step and its arguments (none for the ordinary scores)
LSE_SCORE_EDGES = (
    ("ordinary scores", None, ()),
    ("all scores huge", scores_of_one_sign, (1, 100.0)),
    ("all scores hugely negative", scores_of_one_sign, (-1, 100.0)),
    ("all scores tiny", queries_scaled, (1e-20,)),
)


def scale_edges() -> st.SearchStrategy[Edge]:
    """The scale values at the edges (SCALE_VALUES), shrinking towards scale 0.0."""
    return st.sampled_from(SCALE_VALUES)


def with_scale(problem: Problem, edge: Edge) -> Problem:
    """The problem called with the edge's scale (a step, so the repro rebuilds it; its comment names the edge)."""
    return problem.derive(with_keywords, scale=edge.value, comment=edge.label)


@st.composite
def mask_edges(draw, problem: Problem) -> tuple[Edge, ...]:
    """One of MASK_PATTERNS for `problem`, stored at each of MASK_RANKS (one edge per rank) with each leading
    dimension either full or 1 (broadcast); the key dimension is always n_k. Rows are the mask's own rows."""
    batch, heads, n_q, _ = problem.q.shape
    n_k = problem.n_k
    pattern = draw(st.sampled_from(MASK_PATTERNS), label="mask pattern")
    seed = draw(st.integers(0, 2**32 - 1), label="mask key seed")
    edges = []
    for rank in MASK_RANKS:
        lead = tuple(size if draw(st.booleans(), label=f"rank {rank} mask dim {axis} full") else 1
                     for axis, size in enumerate((batch, heads, n_q)[4 - rank:]))
        shape = (*lead, n_k)
        keys = np.random.default_rng(seed).integers(n_k, size=int(np.prod(lead, dtype=np.int64))).tolist()
        mask = with_mask_pattern(problem, pattern, shape, keys).mask
        edges.append(Edge("mask", f"{pattern}, rank {rank}, shape {shape}", mask, (pattern, shape, keys)))
    return tuple(edges)


def with_mask(problem: Problem, edge: Edge) -> Problem:
    """The problem called with the edge's mask (the step's comment names the pattern, rank and shape)."""
    return problem.derive(with_mask_pattern, *edge.pattern, comment=edge.label)


# keyword -> what is wrong with each of its values outside the protocol of specs.score_mods.check_score_mods, each
# shaped for the problem it is applied to (specs.derivations.with_bad_score_mod makes them)
BAD_SCORE_MODS = {keyword: tuple(values) for keyword, values in BAD_SCORE_MOD_VALUES.items()}
