"""Hypothesis strategies for attention problems.

Sizes deliberately reach past tile sizes: lengths 1, 2, 3, odd lengths, lengths
just below and above 16/32/64/128 and any block size a property chooses,
n_q != n_k, head dims that are not powers of two, grouped kv heads. Values come
from the styles in specs.problems, from tiny to scores of 3e4. Every draw
shrinks towards the smallest, plainest problem (n = 1, d = 1, style "normal",
seed 0), so a failure is reported on the simplest input that still fails.

problems() composes shapes() (under ShapeRules), styles(), scales() and masks(); each is usable on its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from hypothesis import strategies as st

from specs.dtypes import finfo
from specs.problems import ALIBI_LAYOUTS, BIAS_LAYOUTS, MASK_LAYOUTS, SCORE_STYLES, VALUE_STYLES, Problem, build


@dataclass(frozen=True)
class ShapeCapabilities:
    """What the strategies read of an implementation's capabilities (CONTRACT 1's Capabilities has these fields),
    and nothing else: the specification draws problems for an implementation without importing the protocol above
    it, and two implementations with the same ShapeCapabilities and dtype are offered the same problems, so their
    examples can be drawn once (harness.pytest_plugin.record_groups keys its groups by them)."""

    scale: bool = True
    gqa: bool = True
    cross: bool = True
    value_dim: bool = True
    causal_alignment: str = "top_left"
    max_seq: int | None = None
    compiles_per_shape: bool = False

    @classmethod
    def of(cls, caps: object) -> ShapeCapabilities:
        """The fields the strategies read, taken from any object that has them (an implementation's Capabilities)."""
        return cls(**{name: getattr(caps, name) for name in cls.__dataclass_fields__})


MAX_N = 130  # past 128, the largest power-of-two tile size drawn
MAX_TILES = 1024  # tile loops in Python stay fast enough for a property run
TILE_BOUNDARIES = (16, 32, 64, 128)
SCALES = (1.0, 0.5, 2.0, 0.125, 10.0, 1e-3)
MASK_DENSITIES = (0.5, 0.1, 0.9)
# Typical magnitudes the styles put in a float computation (specs.problems): |v| for a value style, an unscaled
# dot product q.k at head dim 64 (the entries' product times sqrt(64)) for a score style; the styles not listed
# stay below 100. A dtype whose largest finite value (finfo) is below one cannot hold that style: float16
# (65504) neither |v| ~ 1e6 nor q.k ~ 2.4e5; bfloat16 and float32 (3.4e38) hold every style. A draw that
# still overflows is rejected where it is cast (harness.api.trial).
STYLE_MAGNITUDES = {"score_style": {"large": 8e3, "huge": 2.4e5}, "value_style": {"large": 1e6, "offset": 1e3}}


def lengths(max_n: int = MAX_N, *, min_n: int = 1, near: Iterable[int] = ()) -> st.SearchStrategy[int]:
    """Sequence lengths, favouring 1, 2, 3 and values around tile boundaries."""
    return _lengths(max_n, min_n, tuple(sorted(set(near))))


# A strategy is a description, the same object for the same arguments: built once, not at every draw of a shape
# (building and validating one_of at each draw was 7% of the main job)
@functools.cache
def _lengths(max_n: int, min_n: int, near: tuple[int, ...]) -> st.SearchStrategy[int]:
    special = {1, 2, 3, 5, 7}
    for b in (*TILE_BOUNDARIES, *near):
        special |= {b - 1, b, b + 1, 2 * b + 1}
    chosen = sorted(n for n in special if min_n <= n <= max_n)
    return st.one_of(st.sampled_from(chosen), st.integers(min_n, max_n))


@functools.cache
def head_dims(max_d: int = 80) -> st.SearchStrategy[int]:
    """Head dimensions, many of them not powers of two."""
    special = [d for d in (1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 31, 32, 33, 48, 64, 65, 80) if d <= max_d]
    return st.one_of(st.sampled_from(special), st.integers(1, max_d))


def block_sizes(max_block: int = 65, min_block: int = 1) -> st.SearchStrategy[int]:
    """Tile sizes including the smallest (1, or an implementation's min_block_size) and sizes that divide
    nothing."""
    special = [size for size in (1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, 64, 65) if min_block <= size <= max_block]
    return st.one_of(st.sampled_from(special or [min_block]), st.integers(min_block, max(min_block, max_block)))


def tile_limit(blocks: Iterable[int]) -> int:
    """Longest sequence for which every tiling in `blocks` stays within MAX_TILES tiles."""
    return max(1, min(MAX_N, int(min(blocks, default=MAX_N) * math.sqrt(MAX_TILES))))


class Shape(NamedTuple):
    """The sizes of a problem; the query heads are heads_kv * group."""

    batch: int
    heads_kv: int
    group: int
    n_q: int
    n_k: int
    d: int
    d_v: int

    def fields(self) -> dict[str, int]:
        """The size fields of a recipe (specs.problems.Recipe)."""
        return dict(batch=self.batch, heads=self.heads_kv * self.group, heads_kv=self.heads_kv, n_q=self.n_q,
                    n_k=self.n_k, d=self.d, d_v=self.d_v)


# The only shapes an implementation that compiles per shape is given (capability compiles_per_shape), so a
# run compiles a bounded number of kernels and shrinking moves between these shapes instead of through every
# smaller one. Past tile boundaries, n_q != n_k both ways, GQA, d_v != d, d not a power of two.
FIXED_SHAPES = tuple(Shape(*sizes) for sizes in (
    (1, 1, 1, 1, 1, 8, 8),
    (1, 1, 1, 3, 3, 4, 4),
    (2, 1, 2, 17, 17, 16, 16),
    (1, 2, 1, 5, 33, 48, 48),
    (1, 1, 3, 33, 5, 24, 40),
    (2, 2, 2, 65, 65, 64, 64),
    (1, 1, 1, 129, 129, 80, 80),
    (1, 2, 2, 130, 97, 33, 17),
))


@dataclass(frozen=True)
class ShapeRules:
    """What a drawn shape must satisfy: lengths, head dims, and the capabilities the caller asked for.

    The defaults admit every shape up to MAX_N and a head dim of 80, drawn freely.
    """

    min_n: int = 1
    max_n: int = MAX_N
    near: tuple[int, ...] = ()  # block sizes whose neighbours the lengths favour
    max_d: int = 80
    gqa: bool = True  # heads_kv < heads allowed
    cross: bool = True  # n_q != n_k allowed
    value_dim: bool = True  # d_v != d allowed
    different_lengths: bool = False  # n_q != n_k required
    same_lengths: bool = False  # n_q == n_k required
    weights_visible: bool = False  # d >= n_k where d_v must equal d (past max_d if need be): one-hot values fit
    keys_cover_queries: bool = False  # n_q <= n_k: bottom-right causal alignment hides no query row entirely
    queries_outnumber_keys: bool = False  # n_q > n_k required: bottom-right causal leaves the top n_q - n_k rows empty
    max_batch: int = 2
    max_heads_kv: int = 3
    fixed: bool = False  # drawn from FIXED_SHAPES where any is admitted (compiles_per_shape)

    def __post_init__(self) -> None:
        if self.queries_outnumber_keys and (self.keys_cover_queries or self.same_lengths or not self.cross):
            raise ValueError("queries_outnumber_keys (n_q > n_k) contradicts keys_cover_queries, same_lengths "
                             "or cross=False")
        if self.different_lengths and (self.same_lengths or not self.cross):
            raise ValueError("different_lengths (n_q != n_k) contradicts same_lengths or cross=False: a property that "
                             "needs them requires the capability cross")

    @classmethod
    def for_caps(cls, caps: ShapeCapabilities | None, *, causal: bool = False, empty_rows: bool = False,
                 **flags) -> ShapeRules:
        """The rules `flags` (fields of ShapeRules) ask for, narrowed to what `caps` supports.

        caps=None stands for an implementation that supports every shape. A causal problem without
        empty rows for a bottom-right aligned implementation keeps n_q <= n_k.
        """
        rules = cls(**flags)
        if caps is None:
            return rules
        max_n = max(rules.min_n, min(rules.max_n, caps.max_seq)) if caps.max_seq else rules.max_n
        return replace(rules, max_n=max_n, gqa=rules.gqa and caps.gqa, cross=rules.cross and caps.cross,
                       value_dim=rules.value_dim and caps.value_dim, fixed=rules.fixed or caps.compiles_per_shape,
                       keys_cover_queries=rules.keys_cover_queries or (
                           causal and not empty_rows and caps.causal_alignment == "bottom_right"))

    def admit(self, shape: Shape) -> bool:
        """Whether a shape obeys the rules."""
        batch, heads_kv, group, n_q, n_k, d, d_v = shape
        widened = self.weights_visible and not self.value_dim and d == n_k  # one-hot values fit past max_d
        return (self.min_n <= min(n_q, n_k) and max(n_q, n_k) <= self.max_n and (max(d, d_v) <= self.max_d or widened)
                and batch <= self.max_batch and heads_kv <= self.max_heads_kv
                and (self.gqa or group == 1) and (self.cross or n_q == n_k) and (self.value_dim or d == d_v)
                and (not self.different_lengths or n_q != n_k) and (not self.same_lengths or n_q == n_k)
                and (not self.weights_visible or self.value_dim or d >= n_k)
                and (not self.keys_cover_queries or n_q <= n_k)
                and (not self.queries_outnumber_keys or n_q > n_k))

    def aligned(self, shape: Shape) -> Shape:
        """The shape, with n_q and n_k swapped where keys_cover_queries needs n_q <= n_k or
        queries_outnumber_keys n_q > n_k."""
        if (self.keys_cover_queries and shape.n_q > shape.n_k) or (self.queries_outnumber_keys
                                                                   and shape.n_q < shape.n_k):
            return shape._replace(n_q=shape.n_k, n_k=shape.n_q)
        return shape


@st.composite
def _free_shapes(draw, rules: ShapeRules) -> Shape:
    """Any shape the rules admit: lengths around tile boundaries, head dims that are not powers of two, GQA."""
    drawn_length = lengths(rules.max_n, min_n=rules.min_n, near=rules.near)
    n_q = draw(drawn_length)
    if rules.different_lengths or rules.queries_outnumber_keys:
        n_k = draw(drawn_length.filter(lambda n: n != n_q))
    elif rules.cross and not rules.same_lengths and draw(st.booleans()):
        n_k = draw(drawn_length)
    else:
        n_k = n_q
    if rules.keys_cover_queries:
        n_q, n_k = sorted((n_q, n_k))
    if rules.queries_outnumber_keys:
        n_k, n_q = sorted((n_q, n_k))
    d = draw(head_dims(rules.max_d))
    if rules.weights_visible and not rules.value_dim:
        d = max(d, n_k)
    d_v = draw(head_dims(rules.max_d)) if rules.value_dim and draw(st.booleans()) else d
    heads_kv = draw(st.integers(1, rules.max_heads_kv))
    group = draw(st.sampled_from([1, 2, 3])) if rules.gqa else 1
    batch = draw(st.integers(1, rules.max_batch))
    return Shape(batch, heads_kv, group, n_q, n_k, d, d_v)


def shapes(rules: ShapeRules) -> st.SearchStrategy[Shape]:
    """Shapes the rules admit, shrinking towards n = 1, d = 1: the admitted FIXED_SHAPES when rules.fixed
    (aligned, and in their order), else any shape."""
    menu = [shape for shape in map(rules.aligned, FIXED_SHAPES) if rules.admit(shape)]
    return st.sampled_from(menu) if rules.fixed and menu else _free_shapes(rules)


def unrepresentable(dtype: str) -> dict[str, tuple[str, ...]]:
    """The score and value styles whose STYLE_MAGNITUDES exceed `dtype`'s largest finite value."""
    largest = float(finfo(dtype).max)
    return {field: tuple(style for style, size in sizes.items() if size > largest)
            for field, sizes in STYLE_MAGNITUDES.items()}


def styles(dtype: str = "float64", score_styles: tuple[str, ...] = SCORE_STYLES,
           value_styles: tuple[str, ...] = VALUE_STYLES) -> st.SearchStrategy[dict[str, str | int]]:
    """Recipe fields score_style, value_style and seed: the styles asked for that `dtype` represents
    (unrepresentable), shrinking towards the first style and seed 0."""
    banned = unrepresentable(dtype)
    return st.builds(dict,
                     score_style=st.sampled_from([s for s in score_styles if s not in banned.get("score_style", ())]),
                     value_style=st.sampled_from([s for s in value_styles if s not in banned.get("value_style", ())]),
                     seed=st.integers(0, 2**32 - 1))


@st.composite
def scales(draw, caps: ShapeCapabilities | None = None) -> float | None:
    """A scale for the recipe: None (the default 1/sqrt(d)) or, half the time when `caps` take one, an
    explicit scale from SCALES or [1e-3, 10]. Shrinks towards None."""
    if (caps is None or caps.scale) and draw(st.booleans()):
        return draw(st.one_of(st.sampled_from(SCALES), st.floats(1e-3, 10.0)))
    return None


def masks() -> st.SearchStrategy[dict[str, str | float]]:
    """Recipe fields mask_layout (from MASK_LAYOUTS) and mask_density, shrinking towards a full mask of
    density 0.5."""
    return st.builds(dict, mask_layout=st.sampled_from(MASK_LAYOUTS), mask_density=st.sampled_from(MASK_DENSITIES))


def problems(*, caps: object | None = None, **options) -> st.SearchStrategy[Problem]:
    """Problems an implementation with capabilities `caps` (read through ShapeCapabilities) can be asked to solve;
    `options`: _problems' keywords. The same strategy object for every `caps` the strategies cannot tell apart."""
    return _problems(caps=None if caps is None else ShapeCapabilities.of(caps), **options)


@functools.cache  # one strategy object per set of arguments: Hypothesis caches what it computes about it
def _problems(
    *,
    caps: ShapeCapabilities | None = None,
    dtype: str = "float64",
    causal: bool = False,
    masked: bool = False,
    scale: bool = True,
    score_styles: tuple[str, ...] = SCORE_STYLES,
    value_styles: tuple[str, ...] = VALUE_STYLES,
    empty_rows: bool = False,
    **shape_flags,
) -> st.SearchStrategy[Problem]:
    """Problems an implementation with capabilities `caps` can be asked to solve in `dtype`.

    causal / masked ask for those features (the caller checks the capability); scale=True lets an
    explicit scale be drawn when the implementation takes one; empty_rows keeps fully masked rows.
    shape_flags are fields of ShapeRules (min_n, max_n, near, max_d, weights_visible,
    different_lengths, same_lengths, queries_outnumber_keys), narrowed to `caps` by ShapeRules.for_caps.
    """
    rules = ShapeRules.for_caps(caps, causal=causal, empty_rows=empty_rows, **shape_flags)

    def problem(shape: Shape, style: dict[str, str | int], explicit_scale: float | None,
                mask: dict[str, str | float]) -> Problem:
        return build(**shape.fields(), **style, scale=explicit_scale, **mask, causal=causal, empty_rows=empty_rows)

    return st.builds(problem, shapes(rules), styles(dtype, score_styles, value_styles),
                     scales(caps) if scale else st.none(), masks() if masked else st.just({}))


SCORE_MODS = ("window_size", "softcap", "alibi_slopes", "bias", "sinks")  # the protocol's (specs.score_mods)
SOFTCAP_RATIOS = (0.1, 2.0)  # a cap between these multiples of the largest |scaled score|: it moves the weights


@st.composite
def with_score_mod(draw, base: st.SearchStrategy[Problem], keyword: str, companions: tuple[str, ...] = ()) -> Problem:
    """A problem of `base` rebuilt with the score modification `keyword` drawn (specs.problems.Recipe's fields), and
    each of `companions` drawn or not: windows from 0 to past the sequence on either side (-1: unbounded), shrinking
    towards (0, 0); caps between SOFTCAP_RATIOS times the problem's largest |scaled score|; slopes per head or per
    (batch, head); biases in each layout, some with -inf entries; sinks finite, infinite (+inf takes every weight, -inf
    none) or dominant (past log n_k: their weight outgrows every key's). q, k, v and the mask are the base problem's
    (drawn first). Companions check the order the modifications compose in (a cap before the bias and ALiBi), and
    shrink away where the failure does not need them."""
    for name in (keyword, *companions):
        if name not in SCORE_MODS:
            raise ValueError(f"unknown score modification {name!r}; one of {SCORE_MODS}")
    problem = draw(base)
    extra: dict = {}
    for name in (keyword, *(c for c in companions if c != keyword)):
        if name == keyword or draw(st.booleans(), label=f"with {name}"):
            extra.update(_score_mod_fields(draw, problem, name))
    recipe = problem.recipe
    fields = {name: getattr(recipe, name) for name in recipe.__dataclass_fields__}
    return build(**{**fields, **extra})


def _score_mod_fields(draw, problem: Problem, keyword: str) -> dict:
    """The Recipe fields of one score modification, drawn for `problem` (with_score_mod)."""
    recipe = problem.recipe
    if keyword == "window_size":
        side = st.one_of(st.integers(0, 3), st.just(-1), st.integers(0, max(recipe.n_q, recipe.n_k) + 1))
        return {"window": (draw(side, label="left"), draw(side, label="right"))}
    if keyword == "softcap":
        scale = problem.scale if problem.scale is not None else 1 / math.sqrt(recipe.d)
        largest = float(abs(scale) * max(abs(problem.q[b, h] @ problem.k[b, h // (recipe.heads // recipe.heads_kv)].T)
                                         .max() for b in range(recipe.batch) for h in range(recipe.heads)))
        ratio = draw(st.floats(*SOFTCAP_RATIOS), label="softcap / largest |scaled score|")
        return {"softcap": float(f"{ratio * largest:.3g}") if largest > 0 else 1.0}
    if keyword == "alibi_slopes":
        return {"alibi": draw(st.sampled_from(ALIBI_LAYOUTS), label="alibi")}
    if keyword == "bias":
        return {"bias": draw(st.sampled_from(BIAS_LAYOUTS), label="bias"),
                "bias_hidden": draw(st.sampled_from((0.0, 0.3)), label="bias_hidden")}
    return {"sinks": draw(st.sampled_from((True, "infinite", "dominant")), label="sinks")}
