"""Hypothesis strategies for attention problems.

Sizes deliberately reach past tile sizes: lengths 1, 2, 3, odd lengths, lengths
just below and above 16/32/64/128 and any block size a property chooses,
n_q != n_k, head dims that are not powers of two, grouped kv heads. Values come
from the styles in specs.problems, from tiny to scores of 3e4. Every draw
shrinks towards the smallest, plainest problem (n = 1, d = 1, style "normal",
seed 0), so a failure is reported on the simplest input that still fails.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from hypothesis import strategies as st

from specs.problems import MASK_LAYOUTS, SCORE_STYLES, VALUE_STYLES, Problem, build

MAX_N = 130  # past 128, the largest power-of-two tile size drawn
MAX_TILES = 1024  # tile loops in Python stay fast enough for a property run
TILE_BOUNDARIES = (16, 32, 64, 128)
SCALES = (1.0, 0.5, 2.0, 0.125, 10.0, 1e-3)
# float16 holds neither |v| ~ 1e6 nor products of entries ~1e3: keep its inputs representable.
UNREPRESENTABLE = {"float16": {"score_style": ("huge",), "value_style": ("large",)}}


def lengths(max_n: int = MAX_N, *, min_n: int = 1, near: Iterable[int] = ()) -> st.SearchStrategy[int]:
    """Sequence lengths, favouring 1, 2, 3 and values around tile boundaries."""
    special = {1, 2, 3, 5, 7}
    for b in (*TILE_BOUNDARIES, *near):
        special |= {b - 1, b, b + 1, 2 * b + 1}
    chosen = sorted(n for n in special if min_n <= n <= max_n)
    return st.one_of(st.sampled_from(chosen), st.integers(min_n, max_n))


def head_dims(max_d: int = 80) -> st.SearchStrategy[int]:
    """Head dimensions, many of them not powers of two."""
    special = [d for d in (1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 31, 32, 33, 48, 64, 65, 80) if d <= max_d]
    return st.one_of(st.sampled_from(special), st.integers(1, max_d))


def block_sizes(max_block: int = 65) -> st.SearchStrategy[int]:
    """Tile sizes including 1 and sizes that divide nothing."""
    return st.one_of(st.sampled_from([1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, 64, 65]),
                     st.integers(1, max_block))


def tile_limit(blocks: Iterable[int]) -> int:
    """Longest sequence for which every tiling in `blocks` stays within MAX_TILES tiles."""
    return max(1, min(MAX_N, int(min(blocks, default=MAX_N) * math.sqrt(MAX_TILES))))


# (batch, heads_kv, group, n_q, n_k, d, d_v): the only shapes an implementation that compiles per shape is
# given (capability compiles_per_shape), so a run compiles a bounded number of kernels and shrinking moves
# between these shapes instead of through every smaller one. Past tile boundaries, n_q != n_k both ways,
# GQA, d_v != d, d not a power of two.
FIXED_SHAPES = (
    (1, 1, 1, 1, 1, 8, 8),
    (1, 1, 1, 3, 3, 4, 4),
    (2, 1, 2, 17, 17, 16, 16),
    (1, 2, 1, 5, 33, 48, 48),
    (1, 1, 3, 33, 5, 24, 40),
    (2, 2, 2, 65, 65, 64, 64),
    (1, 1, 1, 129, 129, 80, 80),
    (1, 2, 2, 130, 97, 33, 17),
)


@dataclass(frozen=True)
class ShapeRules:
    """What a drawn shape must satisfy: lengths, head dims, and the capabilities the caller asked for."""

    min_n: int
    max_n: int
    near: tuple[int, ...]
    max_d: int
    gqa: bool
    cross: bool
    value_dim: bool
    different_lengths: bool
    same_lengths: bool
    weights_visible: bool

    def admit(self, shape: tuple[int, ...]) -> bool:
        """Whether a (batch, heads_kv, group, n_q, n_k, d, d_v) shape obeys the rules."""
        _, _, group, n_q, n_k, d, d_v = shape
        return (self.min_n <= min(n_q, n_k) and max(n_q, n_k) <= self.max_n and max(d, d_v) <= self.max_d
                and (self.gqa or group == 1) and (self.cross or n_q == n_k) and (self.value_dim or d == d_v)
                and (not self.different_lengths or n_q != n_k) and (not self.same_lengths or n_q == n_k)
                and (not self.weights_visible or self.value_dim or d >= n_k))


@st.composite
def _free_shape(draw, rules: ShapeRules):
    """Any shape the rules admit: lengths around tile boundaries, head dims that are not powers of two, GQA."""
    drawn_length = lengths(rules.max_n, min_n=rules.min_n, near=rules.near)
    n_q = draw(drawn_length)
    if rules.different_lengths:
        n_k = draw(drawn_length.filter(lambda n: n != n_q))
    elif rules.cross and not rules.same_lengths and draw(st.booleans()):
        n_k = draw(drawn_length)
    else:
        n_k = n_q
    d = draw(head_dims(rules.max_d))
    if rules.weights_visible and not rules.value_dim:
        d = max(d, n_k)
    d_v = draw(head_dims(rules.max_d)) if rules.value_dim and draw(st.booleans()) else d
    heads_kv = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 2, 3])) if rules.gqa else 1
    batch = draw(st.integers(1, 2))
    return batch, heads_kv, group, n_q, n_k, d, d_v


@st.composite
def problems(
    draw,
    *,
    caps=None,
    dtype: str = "float64",
    causal: bool = False,
    masked: bool = False,
    scale: bool = True,
    max_n: int = MAX_N,
    min_n: int = 1,
    near: tuple[int, ...] = (),
    score_styles: tuple[str, ...] = SCORE_STYLES,
    value_styles: tuple[str, ...] = VALUE_STYLES,
    empty_rows: bool = False,
    max_d: int = 80,
    weights_visible: bool = False,
    different_lengths: bool = False,
    same_lengths: bool = False,
) -> Problem:
    """A problem an implementation with capabilities `caps` can be asked to solve in `dtype`.

    causal / masked ask for those features (the caller checks the capability);
    scale=True lets an explicit scale be drawn when the implementation takes one;
    weights_visible=True keeps d >= n_k when d_v must equal d, so one-hot
    values (specs.problems.one_hot_values) fit; different_lengths=True forces
    n_q != n_k (cross-attention), same_lengths=True n_q == n_k.
    """
    banned = UNREPRESENTABLE.get(dtype, {})
    score_styles = tuple(s for s in score_styles if s not in banned.get("score_style", ()))
    value_styles = tuple(s for s in value_styles if s not in banned.get("value_style", ()))
    gqa = caps is None or caps.gqa
    cross = caps is None or caps.cross
    value_dim = caps is None or caps.value_dim
    bottom_right = caps is not None and caps.causal_alignment == "bottom_right"
    if caps is not None and caps.max_seq:
        max_n = max(min_n, min(max_n, caps.max_seq))

    rules = ShapeRules(min_n, max_n, near, max_d, gqa, cross, value_dim, different_lengths, same_lengths,
                       weights_visible)
    menu = [shape for shape in FIXED_SHAPES if rules.admit(shape)]
    if caps is not None and caps.compiles_per_shape and menu:
        batch, heads_kv, group, n_q, n_k, d, d_v = draw(st.sampled_from(menu))
    else:
        batch, heads_kv, group, n_q, n_k, d, d_v = draw(_free_shape(rules))
    if causal and bottom_right and not empty_rows and n_q > n_k:
        n_q, n_k = n_k, n_q  # bottom-right alignment hides every key from the first n_q - n_k rows
    recipe = dict(
        batch=batch,
        heads=heads_kv * group,
        heads_kv=heads_kv,
        n_q=n_q,
        n_k=n_k,
        d=d,
        d_v=d_v,
        score_style=draw(st.sampled_from(score_styles)),
        value_style=draw(st.sampled_from(value_styles)),
        seed=draw(st.integers(0, 2**32 - 1)),
        causal=causal,
        empty_rows=empty_rows,
    )
    if scale and (caps is None or caps.scale) and draw(st.booleans()):
        recipe["scale"] = draw(st.one_of(st.sampled_from(SCALES), st.floats(1e-3, 10.0)))
    if masked:
        recipe["mask_layout"] = draw(st.sampled_from(MASK_LAYOUTS))
        recipe["mask_density"] = draw(st.sampled_from([0.5, 0.1, 0.9]))
    return build(**recipe)
