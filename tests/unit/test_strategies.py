"""What a `ci` run of the problem strategy actually reaches (docs/design.md, Hypothesis profiles).

Under `ci` each property (and each parametrized implementation) is one derandomized run of 15
examples, seeded from its own digest. RUNS seeded runs with exactly those settings stand for RUNS
property runs: `hypothesis.seed(i)` replaces the digest-derived seed and changes nothing else. A
target counts as reached when at least REQUIRED of the runs draw it at least once; the targets a run
of 15 examples misses more often are listed as strict xfails, so a strategy change that reaches them
shows up as XPASS and the list has to be updated.

Then the parts problems() is composed of, each on its own: shapes obey their ShapeRules, compiles_per_shape
draws only FIXED_SHAPES, float16 gets no unrepresentable style (bfloat16 gets every one), masks draw
MASK_LAYOUTS, and every part shrinks to the plainest problem; each check is also fed a deliberately wrong
strategy that it must catch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import find, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from protocol.registry import Capabilities
from specs.problems import MASK_LAYOUTS, SCORE_STYLES, Problem, Recipe
from specs.reference import attention, repeat_kv
from specs.strategies import (
    FIXED_SHAPES,
    MASK_DENSITIES,
    MAX_N,
    TILE_BOUNDARIES,
    Shape,
    ShapeRules,
    masks,
    problems,
    scales,
    shapes,
    styles,
    unrepresentable,
)

T = TypeVar("T")

RUNS = 100
REQUIRED = 0.9  # a bug shown only by one target goes unseen by at most 1 property run in 10
# harness/pytest_plugin/profiles.py's `ci` profile
CI = settings(max_examples=15, derandomize=True, database=None, deadline=None)
SEARCH = settings(max_examples=2000, database=None)
MISSED = "a ci run of 15 examples draws it in fewer than 90% of property runs (see the measured fraction)"


def _just_above(boundary: int) -> Callable[[Problem], bool]:
    return lambda p: boundary + 1 in (p.n_q, p.n_k)


def _max_score(p: Problem) -> float:
    return float(np.abs(p.q @ repeat_kv(p.k, p.q.shape[1] // p.k.shape[1]).swapaxes(-1, -2)).max())


def _style(name: str) -> Callable[[Problem], bool]:
    return lambda p: p.recipe.score_style == name


REACHED = {
    "n = 1": lambda p: p.n_q == 1 or p.n_k == 1,
    "n_q != n_k": lambda p: p.n_q != p.n_k,
    "d not a power of two": lambda p: p.q.shape[-1] & (p.q.shape[-1] - 1) != 0,
    "d_v != d": lambda p: p.v.shape[-1] != p.q.shape[-1],
    "grouped kv heads": lambda p: p.q.shape[1] > p.k.shape[1] > 1,
    "scores above 1e3": lambda p: _max_score(p) > 1e3,
    "an explicit scale": lambda p: p.scale is not None,
    "score style normal": _style("normal"),
}
MISSED_IN_CI = {
    **{f"n just above {b}": _just_above(b) for b in TILE_BOUNDARIES},
    "odd n above 100": lambda p: any(n > 100 and n % 2 for n in (p.n_q, p.n_k)),
    "multi-query": lambda p: p.q.shape[1] > 1 and p.k.shape[1] == 1,
    **{f"score style {s}": _style(s) for s in SCORE_STYLES if s != "normal"},
}


def ci_run(strategy, run: int) -> list[Problem]:
    """The problems one ci-profile run of `strategy` draws, its seed being `run`."""
    drawn: list[Problem] = []

    def collect(problem: Problem) -> None:
        drawn.append(problem)

    seed(run)(CI(given(problem=strategy)(collect)))()
    return drawn


@pytest.fixture(scope="module")
def runs() -> list[list[Problem]]:
    return [ci_run(problems(), i) for i in range(RUNS)]


def _reach(runs: list[list[Problem]], target: Callable[[Problem], bool]) -> tuple[float, float]:
    """(fraction of runs drawing the target at least once, fraction of all draws that hit it)."""
    hits = [sum(map(target, batch)) for batch in runs]
    return sum(h > 0 for h in hits) / len(runs), sum(hits) / sum(map(len, runs))


def test_ci_runs_draw_15_examples(runs):
    assert all(len(batch) == 15 for batch in runs)


@pytest.mark.parametrize("name", [*REACHED, *(
    pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=MISSED))
    for name in MISSED_IN_CI)])
def test_ci_run_reaches(runs, name):
    per_run, per_draw = _reach(runs, {**REACHED, **MISSED_IN_CI}[name])
    assert per_run >= REQUIRED, (f"{name}: drawn by {per_run:.0%} of {RUNS} ci runs of 15 examples "
                                 f"({per_draw:.1%} of draws), below {REQUIRED:.0%}")


def test_capabilities_are_respected():
    caps = Capabilities(gqa=False, cross=False, value_dim=False)
    for p in [find(problems(caps=caps), lambda p, n=n: p.n_q >= n, settings=SEARCH) for n in (1, 20, 60)]:
        assert p.q.shape[1] == p.k.shape[1] and p.n_q == p.n_k and p.v.shape[-1] == p.q.shape[-1]


def test_float16_problems_stay_representable():
    p = find(problems(dtype="float16"), lambda p: p.recipe.score_style == "large", settings=SEARCH)
    assert p.recipe.value_style != "large" and np.all(np.isfinite(p.v.astype(np.float16)))


# The parts problems() is composed of, each on its own. Each check is a predicate on a draw, searched for
# by `counterexample`; the same predicate fed a deliberately wrong strategy must find one (test_*_is_caught),
# so a check that could not tell a wrong rule from a right one fails too.
PARTS = settings(max_examples=300, database=None, deadline=None)
LOOK = settings(max_examples=500, database=None, deadline=None)


def counterexample(strategy: st.SearchStrategy[T], breaks: Callable[[T], bool]) -> T | None:
    """The smallest draw of `strategy` for which `breaks` holds, or None when LOOK finds none."""
    try:
        return find(strategy, breaks, settings=LOOK)
    except NoSuchExample:
        return None


@st.composite
def rule_sets(draw) -> ShapeRules:
    """Consistent rules: some lengths lie within [min_n, max_n], n_q != n_k is required only where allowed."""
    min_n = draw(st.integers(1, 5))
    cross = draw(st.booleans())
    different_lengths = cross and draw(st.booleans())
    return ShapeRules(min_n=min_n, max_n=draw(st.integers(min_n + 1, MAX_N)),
                      near=tuple(draw(st.lists(st.integers(1, 65), max_size=2))), max_d=draw(st.integers(1, 80)),
                      gqa=draw(st.booleans()), cross=cross, value_dim=draw(st.booleans()),
                      different_lengths=different_lengths, same_lengths=not different_lengths and draw(st.booleans()),
                      weights_visible=draw(st.booleans()), keys_cover_queries=draw(st.booleans()),
                      fixed=draw(st.booleans()))


@PARTS
@given(rules=rule_sets(), data=st.data())
def test_shapes_obey_their_rules(rules, data):
    assert rules.admit(data.draw(shapes(rules)))


# Rules under which a shape strategy that ignores one of them draws a shape they do not admit.
IGNORED = {
    "different_lengths": ShapeRules(different_lengths=True),
    "same_lengths": ShapeRules(same_lengths=True),
    "cross": ShapeRules(cross=False),
    "gqa": ShapeRules(gqa=False),
    "value_dim": ShapeRules(value_dim=False),
    "weights_visible": ShapeRules(value_dim=False, weights_visible=True),
    "keys_cover_queries": ShapeRules(keys_cover_queries=True),
    "queries_outnumber_keys": ShapeRules(queries_outnumber_keys=True),
    "max_d": ShapeRules(max_d=4),
    "min_n": ShapeRules(min_n=3),
    "max_n": ShapeRules(max_n=10),
}


@pytest.mark.parametrize("field", IGNORED)
def test_a_shape_strategy_ignoring_a_rule_is_caught(field):
    rules = IGNORED[field]
    assert counterexample(shapes(rules), lambda s: not rules.admit(s)) is None
    ignoring = replace(rules, **{field: getattr(ShapeRules(), field)})
    assert counterexample(shapes(ignoring), lambda s: not rules.admit(s)) is not None


def test_bottom_right_lengths_are_ordered_before_d_is_widened():
    """Swapping n_q and n_k after widening d to n_k (as the strategy once did) leaves d < n_k: one-hot
    values do not fit."""
    rules = ShapeRules(value_dim=False, weights_visible=True, keys_cover_queries=True)
    assert counterexample(shapes(rules), lambda s: not rules.admit(s)) is None
    swapped_late = shapes(replace(rules, keys_cover_queries=False)).map(rules.aligned)
    assert counterexample(swapped_late, lambda s: s.d < s.n_k) is not None


@pytest.mark.parametrize("options", [{}, dict(different_lengths=True), dict(same_lengths=True, min_n=2),
                                     dict(value_dim=False, weights_visible=True), dict(gqa=False, cross=False),
                                     dict(keys_cover_queries=True), dict(queries_outnumber_keys=True)],
                         ids=lambda o: ",".join(o) or "plain")
def test_fixed_rules_draw_only_fixed_shapes(options):
    """compiles_per_shape: only FIXED_SHAPES (n_q, n_k swapped where keys_cover_queries needs it). A strategy
    ignoring `fixed` draws free shapes and is caught."""
    rules = ShapeRules(fixed=True, **options)
    menu = [rules.aligned(s) for s in FIXED_SHAPES]
    assert counterexample(shapes(rules), lambda s: s not in menu) is None
    assert counterexample(shapes(replace(rules, fixed=False)), lambda s: s not in menu) is not None


@pytest.mark.parametrize("contradiction", [dict(keys_cover_queries=True), dict(same_lengths=True),
                                           dict(cross=False)], ids=lambda c: ",".join(c))
def test_queries_outnumber_keys_rejects_rules_that_forbid_it(contradiction):
    with pytest.raises(ValueError, match="queries_outnumber_keys"):
        ShapeRules(queries_outnumber_keys=True, **contradiction)


@pytest.mark.parametrize("contradiction", [dict(same_lengths=True), dict(cross=False)])
def test_different_lengths_rejects_rules_that_forbid_it(contradiction):
    """A property asking n_q != n_k of a record that declares cross=False would hand it shapes outside its
    capabilities (a yunchang run met one): the rules refuse, and such a property requires cross."""
    with pytest.raises(ValueError, match="different_lengths"):
        ShapeRules(different_lengths=True, **contradiction)


def test_bottom_right_problems_with_more_queries_have_empty_top_rows():
    """queries_outnumber_keys reaches fully-masked-rows-zero's bottom-right case: every draw leaves its top
    n_q - n_k rows without a key (and the strategy as it was, empty_rows alone, draws n_q <= n_k too)."""
    caps = Capabilities(causal=True, causal_alignment="bottom_right")
    more = problems(caps=caps, causal=True, empty_rows=True, queries_outnumber_keys=True)

    def sees_a_key_in_every_row(p: Problem) -> bool:
        allowed = attention(p.q, p.k, p.v, causal=True, causal_alignment="bottom_right").allowed
        return bool(allowed.any(axis=-1).all())

    assert counterexample(more, sees_a_key_in_every_row) is None
    assert counterexample(problems(caps=caps, causal=True, empty_rows=True), sees_a_key_in_every_row) is not None
    assert find(more, lambda _: True, settings=SEARCH).recipe == Recipe(n_q=2, causal=True, empty_rows=True)


def test_for_caps_narrows_the_flags_to_the_capabilities():
    caps = Capabilities(gqa=False, cross=False, value_dim=False, max_seq=50, compiles_per_shape=True,
                        causal_alignment="bottom_right")
    assert ShapeRules.for_caps(caps, causal=True, min_n=2, max_n=100) == ShapeRules(
        min_n=2, max_n=50, gqa=False, cross=False, value_dim=False, keys_cover_queries=True, fixed=True)
    assert not ShapeRules.for_caps(caps, causal=True, empty_rows=True).keys_cover_queries
    assert ShapeRules.for_caps(None, max_d=4, causal=True) == ShapeRules(max_d=4)


def _unrepresentable_in_float16(style: dict) -> bool:
    return style["score_style"] == "huge" or style["value_style"] == "large"


def test_float16_styles_stay_representable():
    """styles() for float16 never draws what unrepresentable() lists; styles drawn as for float64 are caught."""
    assert counterexample(styles("float16"), _unrepresentable_in_float16) is None
    assert counterexample(styles("float64"), _unrepresentable_in_float16) is not None


def test_what_a_dtype_cannot_hold_follows_its_largest_finite_value():
    """float16's 65504 holds neither huge scores nor large values; bfloat16 has float32's exponents and
    holds every style, so its problems draw what float16's cannot."""
    assert unrepresentable("float16") == {"score_style": ("huge",), "value_style": ("large",)}
    for dtype in ("float64", "float32", "bfloat16"):
        assert unrepresentable(dtype) == {"score_style": (), "value_style": ()}, dtype
    assert counterexample(styles("bfloat16"), _unrepresentable_in_float16) is not None


@PARTS
@given(style=styles("float32", score_styles=("tiny", "spiky"), value_styles=("offset",)))
def test_styles_draw_only_the_styles_asked_for(style):
    assert style["score_style"] in ("tiny", "spiky") and style["value_style"] == "offset"


def test_scales_only_where_the_implementation_takes_one():
    """A scale is drawn only for implementations that take one (scales ignoring `caps` are caught), within
    [1e-3, 10]."""
    assert counterexample(scales(Capabilities(scale=False)), lambda s: s is not None) is None
    assert counterexample(scales(), lambda s: s is not None) is not None
    assert counterexample(scales(Capabilities(scale=True)), lambda s: s is not None and not 1e-3 <= s <= 10) is None


def _layout_errors(strategy: st.SearchStrategy[dict]) -> list[str]:
    """The MASK_LAYOUTS `strategy` never draws, then any layout it draws outside MASK_LAYOUTS."""
    missed = [layout for layout in MASK_LAYOUTS
              if counterexample(strategy, lambda m, layout=layout: m["mask_layout"] == layout) is None]
    outside = counterexample(strategy, lambda m: m["mask_layout"] not in MASK_LAYOUTS)
    return missed + ([outside["mask_layout"]] if outside else [])


def test_masks_draw_every_mask_layout_and_only_those():
    assert _layout_errors(masks()) == []
    renamed = masks().map(lambda m: {**m, "mask_layout": m["mask_layout"].replace("key_padding", "padding")})
    assert _layout_errors(renamed) == ["key_padding", "padding"]


@PARTS
@given(mask=masks())
def test_masks_draw_listed_densities(mask):
    assert mask["mask_density"] in MASK_DENSITIES


PLAINEST = {
    "shapes": (shapes(ShapeRules()), Shape(1, 1, 1, 1, 1, 1, 1)),
    "shapes, min_n=2": (shapes(ShapeRules(min_n=2)), Shape(1, 1, 1, 2, 2, 1, 1)),
    "shapes, different lengths": (shapes(ShapeRules(different_lengths=True)), Shape(1, 1, 1, 1, 2, 1, 1)),
    "shapes, fixed": (shapes(ShapeRules(fixed=True)), FIXED_SHAPES[0]),
    "styles": (styles(), dict(score_style="normal", value_style="normal", seed=0)),
    "scales": (scales(), None),
    "masks": (masks(), dict(mask_layout="full", mask_density=0.5)),
    "problems": (problems().map(lambda p: p.recipe), Recipe()),
    "masked problems": (problems(masked=True).map(lambda p: p.recipe), Recipe(mask_layout="full")),
    "causal problems": (problems(causal=True).map(lambda p: p.recipe), Recipe(causal=True)),
}


@pytest.mark.parametrize("part", PLAINEST)
def test_draws_shrink_to_the_plainest(part):
    """Every part shrinks to n = 1, d = 1, style normal, seed 0, no scale, a full mask of density 0.5: its
    plainest choice comes first (sampled_from shrinks to the first element, integers to the lower bound)."""
    strategy, plainest = PLAINEST[part]
    assert find(strategy, lambda _: True, settings=SEARCH) == plainest


def test_a_part_listing_another_style_first_is_caught():
    plainest = PLAINEST["styles"][1]
    assert find(styles(score_styles=SCORE_STYLES[::-1]), lambda _: True, settings=SEARCH) != plainest


def test_the_strategies_read_only_fields_the_protocol_defines():
    """specs.strategies types capabilities structurally (specs sits below the protocol): every field it reads is
    one of Capabilities' fields, with the same annotation, so a renamed capability cannot go unnoticed."""
    import dataclasses

    from protocol.registry import Capabilities
    from specs.strategies import ShapeCapabilities

    fields = {f.name: f.type for f in dataclasses.fields(Capabilities)}
    for name, annotation in ShapeCapabilities.__annotations__.items():
        assert name in fields, f"specs.strategies reads caps.{name}, which Capabilities does not define"
        assert str(fields[name]) == str(annotation), (name, fields[name], annotation)
