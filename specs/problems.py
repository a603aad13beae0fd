"""Attention problems built deterministically from a small recipe.

A recipe (sizes, a seed, a value style) rebuilds the same float64 arrays on any
machine (NumPy's PCG64 stream is stable), so a failing property's smallest
input is printed as one short `build(...)` call instead of a page of numbers.
Transformations a property applies afterwards (a permutation, one-hot values)
are named functions, steps, called with literal arguments (specs.literals):
Problem.derive calls one and remembers the call, and the repro snippet prints
the same call, so what the property used is what the snippet rebuilds
(specs.problem_code reads a problem's code back without running strings).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specs.dtypes import numpy_dtype
from specs.literals import literal_code
from specs.validation import AttentionInputError

# How q and k are drawn; each style stresses a different part of the computation.
SCORE_STYLES = (
    "normal",  # q, k ~ N(0, 1): ordinary scores of order 1
    "integers",  # small integers: exact scores and exact ties
    "large",  # scores of order 1e3: softmax overflows without the max subtraction
    "huge",  # scores of order 3e4: weights are one-hot to working precision
    "tiny",  # entries ~1e-20: scores underflow towards 0, weights nearly uniform
    "spiky",  # one key per query aligned with it: a dominant score
    "mixed",  # row magnitudes log-uniform in [1e-3, 1e3]
)
VALUE_STYLES = (
    "normal",  # v ~ N(0, 1)
    "integers",  # small integers
    "large",  # |v| ~ 1e6
    "offset",  # 1e3 + N(0, 1): catches weights that do not sum to one
)
MASK_LAYOUTS = ("full", "query_key", "key_padding")
SINK_STYLES = (False, True, "infinite", "dominant")  # none; finite of order 1; +inf and -inf; past log n_k
# Beyond the seeds (specs.score_mods): a bias of shape (batch, heads, n_q, n_k), (heads, n_q, n_k) or a key bias
# (batch, 1, 1, n_k); ALiBi slopes per head or per (batch, head). Their values are multiples of 1/8 (bias and sinks,
# in [-4, 4]) and of 1/64 (slopes, in (0, 1]): exact in every dtype, so the oracle sees what an implementation gets.
BIAS_LAYOUTS = ("full", "heads", "keys")
ALIBI_LAYOUTS = ("heads", "batch_heads")
# The project's modules of steps (@problem_step), which specs.problem_code imports before it reads a problem's code
STEP_MODULES = ("specs.problems", "specs.derivations", "specs.constructions")
_STEPS: dict = {}  # name -> step function, as @problem_step registers them
# What a problem's code() must rebuild bit for bit (and a step must not change in the problem it derives from).
REBUILT_FIELDS = ("recipe", "q", "k", "v", "mask", "scale", "causal", "bias", "window_size", "softcap", "alibi_slopes",
            "sinks")
# the dtype the modification arrays are handed over in, by the implementation's dtype: a bias in its own, slopes and
# sinks in float32 below float64 (flash_attn_func requires float32 slopes)
_MOD_DTYPES = {"bias": None, "alibi_slopes": "float32", "sinks": "float32"}


class CodeMismatch(Exception):
    """A problem's code() does not rebuild it: its repro snippet would show another input."""


def problem_step(function: Callable[..., Problem]) -> Callable[..., Problem]:
    """Register `function(p, *literals, **literals) -> Problem`, a module-level function that returns a new problem
    and leaves `p` as it was, as a step: calling it, directly or through Problem.derive, gives the new problem with
    the call remembered, so the repro imports the step from its module by its name and calls it on the same
    arguments (specs.problem_code finds it by that name: one function per name)."""
    if "<" in function.__qualname__:
        raise ValueError(f"step {function.__qualname__} must be a module-level function, which a snippet imports")
    known = _STEPS.get(function.__name__)
    if known is not None and (known.__module__, known.__qualname__) != (function.__module__, function.__qualname__):
        raise ValueError(f"two steps are named {function.__name__}: in {known.__module__} and {function.__module__}")

    @functools.wraps(function)
    def step(p: Problem, *args, **kwargs) -> Problem:
        return p.derive(step, *args, **kwargs)

    step.makes = function
    _STEPS[function.__name__] = step
    return step


def step_imports(steps: tuple[Step, ...]) -> tuple[str, ...]:
    """The import lines of the step functions `steps` call, one line per module."""
    by_module: dict[str, list[str]] = {}
    for step in steps:
        names = by_module.setdefault(step.function.__module__, [])
        if step.function.__name__ not in names:
            names.append(step.function.__name__)
    return tuple(f"from {module} import {', '.join(names)}" for module, names in by_module.items())


def registered_steps() -> dict[str, Callable[..., Problem]]:
    """The steps registered so far, by name."""
    return dict(_STEPS)


@dataclass(frozen=True, eq=False)
class Step:
    """One call of a step function on the problem before it: `p = name(p, *args, **kwargs)  # comment`."""

    function: Callable[..., Problem]
    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()
    comment: str = ""

    def line(self, *, with_comment: bool = True) -> str:
        """The snippet's line for this step (its arguments as specs.literals writes them)."""
        parts = ["p", *(literal_code(arg) for arg in self.args),
                 *(f"{name}={literal_code(value)}" for name, value in self.kwargs)]
        line = f"p = {self.function.__name__}({', '.join(parts)})"
        return f"{line}  # {self.comment}" if self.comment and with_comment else line

    def __eq__(self, other: object) -> bool:  # equal when they write the same call (NaN arguments included)
        return isinstance(other, Step) and self.line(with_comment=False) == other.line(with_comment=False)

    def __hash__(self) -> int:
        return hash(self.line(with_comment=False))


@dataclass(frozen=True)
class Recipe:
    """Everything needed to rebuild a problem; its repr is valid Python."""

    batch: int = 1
    heads: int = 1
    heads_kv: int = 1
    n_q: int = 1
    n_k: int = 1
    d: int = 1
    d_v: int = 1
    seed: int = 0
    score_style: str = "normal"
    value_style: str = "normal"
    scale: float | None = None
    causal: bool = False
    mask_layout: str | None = None  # None: no mask
    mask_density: float = 0.5
    empty_rows: bool = False  # keep fully masked rows instead of repairing them
    bias: str | None = None  # a BIAS_LAYOUTS layout; None: no bias
    bias_hidden: float = 0.0  # the fraction of bias entries that are -inf (hidden keys)
    window: tuple[int, int] | None = None  # window_size=(left, right)
    softcap: float = 0.0
    alibi: str | None = None  # an ALIBI_LAYOUTS layout of the slopes; None: no ALiBi
    sinks: bool | str = False  # True: finite sinks of order 1; "infinite": +inf and -inf; "dominant": past log n_k

    def __post_init__(self) -> None:
        sizes = {f: getattr(self, f) for f in ("batch", "heads", "heads_kv", "n_q", "n_k", "d", "d_v")}
        for name, size in sizes.items():
            if not isinstance(size, int) or size < 1:
                raise AttentionInputError(f"recipe {name} must be a positive int, got {size!r}")
        if self.heads % self.heads_kv:
            raise AttentionInputError(f"heads={self.heads} is not a multiple of heads_kv={self.heads_kv}")
        if self.score_style not in SCORE_STYLES:
            raise AttentionInputError(f"unknown score_style {self.score_style!r}; one of {SCORE_STYLES}")
        if self.value_style not in VALUE_STYLES:
            raise AttentionInputError(f"unknown value_style {self.value_style!r}; one of {VALUE_STYLES}")
        if self.mask_layout is not None and self.mask_layout not in MASK_LAYOUTS:
            raise AttentionInputError(f"unknown mask_layout {self.mask_layout!r}; one of {MASK_LAYOUTS}")
        if self.mask_layout is not None and self.causal:
            raise AttentionInputError("a recipe has either a causal flag or a mask, not both")
        if self.bias is not None and self.bias not in BIAS_LAYOUTS:
            raise AttentionInputError(f"unknown bias layout {self.bias!r}; one of {BIAS_LAYOUTS}")
        if self.alibi is not None and self.alibi not in ALIBI_LAYOUTS:
            raise AttentionInputError(f"unknown alibi layout {self.alibi!r}; one of {ALIBI_LAYOUTS}")
        if self.sinks not in SINK_STYLES:
            raise AttentionInputError(f"unknown sinks {self.sinks!r}; one of {SINK_STYLES}")

    def __repr__(self) -> str:
        defaults = Recipe.__dataclass_fields__
        parts = [f"{f}={getattr(self, f)!r}" for f in defaults
                 if getattr(self, f) != defaults[f].default]
        return f"build({', '.join(parts)})"


@dataclass(frozen=True, eq=False)
class Problem:
    """float64 q, k, v (+ mask) with the keyword arguments of CONTRACT 1."""

    recipe: Recipe
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None = None
    scale: float | None = None
    causal: bool = False
    bias: np.ndarray | None = None
    window_size: tuple[int, int] | None = None
    softcap: float = 0.0
    alibi_slopes: np.ndarray | None = None
    sinks: np.ndarray | None = None
    steps: tuple[Step, ...] = field(default=())
    origin: str = ""  # Python expression that builds this problem; default: the recipe

    def kwargs(self) -> dict:
        """Only the keywords this problem uses, so impls lacking the others can be called."""
        kw: dict = {}
        if self.scale is not None:
            kw["scale"] = self.scale
        if self.causal:
            kw["causal"] = True
        if self.mask is not None:
            kw["mask"] = self.mask
        if self.window_size is not None:
            kw["window_size"] = self.window_size
        if self.softcap:
            kw["softcap"] = self.softcap
        kw.update({name: getattr(self, name) for name in _MOD_DTYPES if getattr(self, name) is not None})
        return kw

    def handed(self, dtype: str) -> Problem:
        """This problem with its floating score-modification arrays in the dtypes an implementation in `dtype` is
        handed them (_MOD_DTYPES); exact, as their values are (BIAS_LAYOUTS). Others stay as they are: a bias of
        integers is a bad value to be rejected, not converted."""
        if dtype == "float64":
            return self
        cast = {name: getattr(self, name).astype(numpy_dtype(handed or dtype)) for name, handed in _MOD_DTYPES.items()
                if getattr(self, name) is not None and np.issubdtype(getattr(self, name).dtype, np.floating)}
        return dataclasses.replace(self, **cast) if cast else self

    @property
    def has_mod_arrays(self) -> bool:
        return any(getattr(self, name) is not None for name in _MOD_DTYPES)

    def replace(self, **changes) -> Problem:
        """The same problem with some arrays or keywords changed (what steps call)."""
        return dataclasses.replace(self, **changes)

    def derive(self, step: Callable[..., Problem], *args, comment: str = "", **kwargs) -> Problem:
        """The problem step(self, *args, **kwargs) makes of this one, remembering the call for the repro (`comment`
        ends its line). `step` is a @problem_step and its arguments literals (specs.literals), so the snippet's
        line calls the same function on the same values; it must leave this problem as it was."""
        makes = getattr(step, "makes", None)
        if makes is None:
            raise ValueError(f"{getattr(step, '__qualname__', step)!r} is not a @problem_step: derive calls named "
                             "steps only, so the repro can print the call")
        recorded = Step(step, args, tuple(kwargs.items()), comment)
        recorded.line()  # refuses arguments that are not literals before the step runs
        before = {name: _copy(getattr(self, name)) for name in REBUILT_FIELDS}
        derived = makes(self, *args, **kwargs)
        if not isinstance(derived, Problem):
            raise TypeError(f"step {step.__name__} must return a Problem, returned {type(derived).__name__}")
        changed = [name for name, value in before.items() if not identical(value, getattr(self, name))]
        if changed:
            raise ValueError(f"{recorded.line()!r} changes the {', '.join(changed)} of the problem it derives from: "
                             "copy an array before writing to it")
        return dataclasses.replace(derived, origin=self.origin or repr(self.recipe), steps=self.steps + (recorded,))

    def scale_queries(self, factor: float) -> Problem:
        """The same problem with every score multiplied by `factor` (q scaled)."""
        return self.derive(queries_scaled, factor)

    @property
    def n_q(self) -> int:
        return self.q.shape[2]

    @property
    def n_k(self) -> int:
        return self.k.shape[2]

    def describe(self) -> str:
        parts = [f"q {self.q.shape}", f"k {self.k.shape}", f"v {self.v.shape}",
                 f"scale={self.scale}", f"causal={self.causal}"]
        parts.append("mask=None" if self.mask is None else f"mask {self.mask.shape}")
        parts += [f"{name} {value.shape}" if isinstance(value, np.ndarray) else f"{name}={value}"
                  for name, value in self.kwargs().items() if name in ("window_size", "softcap", *_MOD_DTYPES)]
        return ", ".join(parts)

    def imports(self) -> tuple[str, ...]:
        """The import lines this problem's code needs: what builds it, then each step function from its module."""
        examples = self.origin.startswith("examples.")
        return ("from specs import examples" if examples else "from specs.problems import build",
                *step_imports(self.steps))

    def code(self) -> str:
        """Python lines that rebuild this problem as `p`, after imports()."""
        return "\n".join([f"p = {self.origin or repr(self.recipe)}", *(step.line() for step in self.steps)])

    def __repr__(self) -> str:
        return "; ".join([self.origin or repr(self.recipe), *(step.line(with_comment=False) for step in self.steps)])


@problem_step
def queries_scaled(p: Problem, factor: float) -> Problem:
    """Every query times `factor` (every score times `factor`)."""
    return p.replace(q=p.q * factor)


def _copy(value: object) -> object:
    return value.copy() if isinstance(value, np.ndarray) else value


def identical(a: object, b: object) -> bool:
    """Equal, and for arrays equal bit for bit (NaN payloads and signed zeros included); a float NaN (a bad softcap)
    is identical to a float NaN."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _scores_inputs(rng: np.random.Generator, r: Recipe) -> tuple[np.ndarray, np.ndarray]:
    q_shape, k_shape = (r.batch, r.heads, r.n_q, r.d), (r.batch, r.heads_kv, r.n_k, r.d)
    style = r.score_style
    if style == "integers":
        return rng.integers(-3, 4, q_shape).astype(float), rng.integers(-3, 4, k_shape).astype(float)
    q, k = rng.standard_normal(q_shape), rng.standard_normal(k_shape)
    if style == "large":
        return q * np.sqrt(1e3), k * np.sqrt(1e3)
    if style == "huge":
        return q * np.sqrt(3e4), k * np.sqrt(3e4)
    if style == "tiny":
        return q * 1e-20, k * 1e-20
    if style == "mixed":
        return (q * 10.0 ** rng.uniform(-3, 3, q_shape[:-1] + (1,)),
                k * 10.0 ** rng.uniform(-3, 3, k_shape[:-1] + (1,)))
    if style == "spiky":
        group = r.heads // r.heads_kv
        for b in range(r.batch):
            for h in range(r.heads_kv):
                for i in range(r.n_q):
                    j = int(rng.integers(r.n_k))
                    k[b, h, j] = 4.0 * q[b, h * group, i]
    return q, k


def _values(rng: np.random.Generator, r: Recipe) -> np.ndarray:
    shape = (r.batch, r.heads_kv, r.n_k, r.d_v)
    if r.value_style == "integers":
        return rng.integers(-5, 6, shape).astype(float)
    v = rng.standard_normal(shape)
    if r.value_style == "large":
        return v * 1e6
    if r.value_style == "offset":
        return v + 1e3
    return v


def _mask(rng: np.random.Generator, r: Recipe) -> np.ndarray | None:
    if r.mask_layout is None:
        return None
    shape = {"full": (r.batch, r.heads, r.n_q, r.n_k),
             "query_key": (r.n_q, r.n_k),
             "key_padding": (r.batch, 1, 1, r.n_k)}[r.mask_layout]
    mask = rng.random(shape) < r.mask_density
    if not r.empty_rows:
        rows = mask.reshape(-1, r.n_k)
        for row in np.flatnonzero(~rows.any(axis=1)):
            rows[row, rng.integers(r.n_k)] = True
    return mask


def _score_mods(rng: np.random.Generator, r: Recipe) -> dict:
    """The recipe's score modifications, drawn after q, k, v and the mask (a recipe without them draws nothing)."""
    mods: dict = {"window_size": r.window, "softcap": r.softcap}
    if r.bias is not None:
        shape = {"full": (r.batch, r.heads, r.n_q, r.n_k), "heads": (r.heads, r.n_q, r.n_k),
                 "keys": (r.batch, 1, 1, r.n_k)}[r.bias]
        bias = rng.integers(-32, 33, shape) / 8.0
        mods["bias"] = np.where(rng.random(shape) < r.bias_hidden, -np.inf, bias) if r.bias_hidden else bias
    if r.alibi is not None:
        mods["alibi_slopes"] = rng.integers(1, 65, (r.heads,) if r.alibi == "heads" else (r.batch, r.heads)) / 64.0
    if r.sinks:
        finite = rng.integers(-32, 33, (r.heads,)) / 8.0
        if r.sinks == "infinite":  # +inf takes every weight (output 0, log-sum-exp +inf); -inf is no sink at all
            finite = np.where(np.arange(r.heads) % 2 == 0, np.inf, -np.inf)
        elif r.sinks == "dominant":  # a sink whose weight outgrows every key's at this length: the output small
            finite = np.full(r.heads, float(np.ceil(np.log(r.n_k))) + 8.0) + finite / 8
        mods["sinks"] = finite
    return mods


def build(**fields) -> Problem:
    """Rebuild the problem a recipe describes (the repro snippets call this)."""
    recipe = Recipe(**fields)
    rng = np.random.default_rng(recipe.seed)
    q, k = _scores_inputs(rng, recipe)
    v = _values(rng, recipe)
    mask = _mask(rng, recipe)
    return Problem(recipe, q, k, v, mask=mask, scale=recipe.scale, causal=recipe.causal, **_score_mods(rng, recipe))


def one_hot_values(k_shape: tuple[int, ...], d_v: int) -> np.ndarray:
    """Values whose row j is the unit vector e_j (padded with zeros to d_v >= n_k).

    With these values, output row i is exactly the weight row P_i: a weighted
    sum of one-hot rows involves only products with 1 and sums with 0, which
    are exact in floating point. This is how the suite observes the weights of
    an implementation that only returns its output.
    """
    batch, heads_kv, n_k, _ = k_shape
    if d_v < n_k:
        raise AttentionInputError(f"one-hot values need d_v >= n_k, got d_v={d_v} < n_k={n_k}")
    v = np.zeros((batch, heads_kv, n_k, d_v))
    v[:, :, np.arange(n_k), np.arange(n_k)] = 1.0
    return v
