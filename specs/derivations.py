"""The steps properties apply to a drawn problem (Problem.derive): keywords set, positions and heads taken or
reordered, values replaced, entries poisoned, mask entries hidden or shown. Each is a @problem_step called with
literals, so the repro snippet prints the same call (specs.problem_code reads it back).

Index arguments are tuples over the leading axes of an array: an int, a list of ints (NumPy's fancy index), or None
for the whole axis (`:`); the rest of the axes are taken whole.
"""

from __future__ import annotations

import numpy as np

from specs import examples
from specs.fill import finite_garbage
from specs.problems import Problem, one_hot_values, problem_step
from specs.validation import AttentionInputError

_KEYWORDS = ("scale", "causal", "softcap", "window_size")
_TENSORS = ("q", "k", "v")


def _index(index: tuple) -> tuple:
    return tuple(slice(None) if item is None else item for item in index)


def _tensors(names: str) -> tuple[str, ...]:
    """"q", "kv", "qkv": the tensors a step changes."""
    if not names or any(name not in _TENSORS for name in names):
        raise AttentionInputError(f"tensors are named by letters of 'qkv', got {names!r}")
    return tuple(names)


# -- keywords --------------------------------------------------------------------------------------------------
@problem_step
def with_keywords(p: Problem, **keywords: object) -> Problem:
    """The problem called with these scalar keywords (scale, causal, softcap, window_size), bad values included."""
    unknown = sorted(set(keywords) - set(_KEYWORDS))
    if unknown:
        raise AttentionInputError(f"with_keywords sets {_KEYWORDS}, not {unknown}")
    return p.replace(**keywords)


@problem_step
def with_mask_pattern(p: Problem, pattern: str, shape: tuple, keys: list) -> Problem:
    """A boolean mask of `shape` (its last axis n_k) that hides nothing, hides every key, or, row by row, shows
    (or hides) the one key `keys` names (specs.keyword_edges.MASK_PATTERNS)."""
    shape = tuple(shape)
    if pattern == "hides nothing":
        return p.replace(mask=np.ones(shape, dtype=bool))
    if pattern == "hides every key":
        return p.replace(mask=np.zeros(shape, dtype=bool))
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if len(keys) != rows or not all(0 <= key < shape[-1] for key in keys):
        raise AttentionInputError(f"a mask of shape {shape} needs {rows} row keys in [0, {shape[-1]}), got {keys!r}")
    one_hot = np.eye(shape[-1], dtype=bool)[keys].reshape(shape)
    if pattern == "shows one key per row":
        return p.replace(mask=one_hot)
    if pattern == "hides one key per row":
        return p.replace(mask=~one_hot)
    raise AttentionInputError(f"unknown mask pattern {pattern!r}")


@problem_step
def with_mask_entries(p: Problem, index: tuple, visible: bool) -> Problem:
    """The problem's mask (none: every key visible) broadcast to (batch, heads, n_q, n_k), with the entries at
    `index` set to `visible`."""
    mask = np.array(np.broadcast_to(True if p.mask is None else p.mask, p.q.shape[:3] + (p.n_k,)))
    mask[_index(index)] = visible
    return p.replace(mask=mask)


@problem_step
def with_random_key_padding(p: Problem, seed: int, hidden: float) -> Problem:
    """A key-padding mask (batch, 1, 1, n_k) hiding each key with probability `hidden` (seeded), key 0 always
    shown, so every row keeps a key."""
    mask = ~(np.random.default_rng(seed).random((p.q.shape[0], 1, 1, p.n_k)) < hidden)
    mask[..., 0] = True
    return p.replace(mask=mask)


@problem_step
def with_arrays(p: Problem, **arrays: list) -> Problem:
    """q, k, v or the bias, slopes and sinks given as nested lists of floats (a fixed witness)."""
    unknown = sorted(set(arrays) - {"q", "k", "v", "bias", "alibi_slopes", "sinks"})
    if unknown:
        raise AttentionInputError(f"with_arrays sets q, k, v, bias, alibi_slopes or sinks, not {unknown}")
    return p.replace(**{name: np.array(value, dtype=np.float64) for name, value in arrays.items()})


# -- positions and heads ---------------------------------------------------------------------------------------
@problem_step
def positions_taken(p: Problem, queries: list | None = None, keys: list | None = None) -> Problem:
    """Queries at the positions `queries` (in that order) and keys with their values at `keys`: a permutation,
    a subset or a repetition; None keeps the side as it is."""
    changes = {}
    if queries is not None:
        changes["q"] = p.q[:, :, queries]
    if keys is not None:
        changes.update(k=p.k[:, :, keys], v=p.v[:, :, keys])
    return p.replace(**changes)


@problem_step
def spans_taken(p: Problem, queries: tuple | None = None, keys: tuple | None = None) -> Problem:
    """Queries at positions start:stop of `queries`, and keys with their values at start:stop of `keys` (a prefix,
    a suffix, a part); None keeps the side as it is."""
    changes = {}
    if queries is not None:
        changes["q"] = p.q[:, :, slice(*queries)]
    if keys is not None:
        changes.update(k=p.k[:, :, slice(*keys)], v=p.v[:, :, slice(*keys)])
    return p.replace(**changes)


@problem_step
def heads_taken(p: Problem, query_head: int, kv_head: int) -> Problem:
    """One query head and one kv head, alone."""
    return p.replace(q=p.q[:, query_head:query_head + 1], k=p.k[:, kv_head:kv_head + 1],
                     v=p.v[:, kv_head:kv_head + 1])


@problem_step
def kv_heads_repeated(p: Problem, group: int) -> Problem:
    """Each kv head repeated `group` times: grouped heads written out as plain multi-head attention."""
    return p.replace(k=np.repeat(p.k, group, axis=1), v=np.repeat(p.v, group, axis=1))


@problem_step
def heads_tiled(p: Problem, copies: int, kv_heads: bool) -> Problem:
    """The query heads tiled `copies` times (a head count a sharding across `copies` ranks divides), and with
    `kv_heads` the kv heads too (for an implementation that takes one head count for q, k and v)."""
    tiled = {name: np.tile(getattr(p, name), (1, copies, 1, 1)) for name in ("qkv" if kv_heads else "q")}
    return p.replace(**tiled)


# -- values and inputs -----------------------------------------------------------------------------------------
@problem_step
def values_of(p: Problem, kind: str) -> Problem:
    """Values replaced: "ones" (every output row is its weights' sum), "abs" (|V|: the rounding of the weights
    themselves), "half_plus_one" (1 + V / 2, in [0.5, 1.5] for the usual values: a mean far from 0)."""
    values = {"ones": np.ones_like, "abs": np.abs, "half_plus_one": lambda v: 1 + v / 2}
    if kind not in values:
        raise AttentionInputError(f"values_of takes one of {sorted(values)}, got {kind!r}")
    return p.replace(v=values[kind](p.v))


@problem_step
def one_hot_valued(p: Problem, d_v: int) -> Problem:
    """Values e_j (specs.problems.one_hot_values): each output row is its weight row."""
    return p.replace(v=one_hot_values(p.k.shape, d_v))


@problem_step
def values_resized(p: Problem, change: int) -> Problem:
    """Values one row longer (the first repeated at the end, change=1) or shorter (the last dropped, change=-1)
    than the keys: a shape the call must refuse."""
    if change == 1:
        return p.replace(v=np.concatenate([p.v, p.v[:, :, :1]], axis=2))
    if change == -1:
        return p.replace(v=p.v[:, :, :-1])
    raise AttentionInputError(f"values_resized changes the length by 1 or -1, got {change!r}")


@problem_step
def self_attention_of_queries(p: Problem) -> Problem:
    """Q = K = V = the queries: one sequence attending to itself."""
    return p.replace(k=p.q, v=p.q)


@problem_step
def values_affine(p: Problem, a: float, b: list) -> Problem:
    """V -> a V + b, b a vector of d_v entries."""
    return p.replace(v=a * p.v + np.array(b))


@problem_step
def keys_translated(p: Problem, c: list) -> Problem:
    """Every key moved by the vector c."""
    return p.replace(k=p.k + np.array(c))


@problem_step
def inputs_garbled(p: Problem) -> Problem:
    """q, k, v replaced by finite values of no meaning (specs.fill.finite_garbage): a call that must not read them."""
    return p.replace(q=finite_garbage(p.q), k=finite_garbage(p.k), v=finite_garbage(p.v))


@problem_step
def projected(p: Problem) -> Problem:
    """q, k, v through the seeded projection weights of specs.examples.project (seed 001's multi-head pipeline)."""
    return p.replace(**dict(zip("qkv", examples.project(p), strict=True)))


@problem_step
def scores_of_one_sign(p: Problem, sign: int, magnitude: float) -> Problem:
    """|q| and |k| times `magnitude`, q negated where sign < 0: every score of a row shares its sign and size."""
    q = np.abs(p.q) * magnitude if sign > 0 else -np.abs(p.q) * magnitude
    return p.replace(q=q, k=np.abs(p.k) * magnitude)


@problem_step
def affinely_changed(p: Problem, tensors: str, axis: int, start: int, stop: int | None, a: float,
                     b: float) -> Problem:
    """x -> a x + b on positions start:stop of `axis` (1: heads, 2: positions) of each named tensor; the rest
    as it was."""
    where = (slice(None),) * axis + (slice(start, stop),)
    changes = {}
    for name in _tensors(tensors):
        x = getattr(p, name).copy()
        x[where] = a * x[where] + b
        changes[name] = x
    return p.replace(**changes)


@problem_step
def entries_set(p: Problem, tensors: str, index: tuple, value: float | list) -> Problem:
    """The entries at `index` of each named tensor set to `value` (a NaN, an infinity, a huge number, or a list
    broadcast over them)."""
    changes = {}
    for name in _tensors(tensors):
        x = getattr(p, name).copy()
        x[_index(index)] = value
        changes[name] = x
    return p.replace(**changes)


# -- values outside the protocol (specs.keyword_edges.BAD_SCORE_MODS) --------------------------------------------
@problem_step
def with_bad_score_mod(p: Problem, keyword: str, label: str) -> Problem:
    """The problem with the bad value `label` of `keyword` (specs.keyword_edges.BAD_SCORE_MODS), shaped for it."""
    makers = BAD_SCORE_MOD_VALUES.get(keyword, {})
    if label not in makers:
        raise AttentionInputError(f"no bad value {label!r} of {keyword!r}; {keyword} has {sorted(makers)}")
    return p.replace(**{keyword: makers[label](p)})


def _bias_keys_short(p: Problem) -> int:
    """One key short, or none where one key short would broadcast (n_k = 2)."""
    return p.n_k - 1 if p.n_k > 2 else 0


BAD_SCORE_MOD_VALUES = {
    "window_size": {"a window of non-integers": lambda p: (1.5, 2), "a window of one side": lambda p: (4,),
                    "a window that is one integer": lambda p: 4},
    "softcap": {"a NaN softcap": lambda p: float("nan"), "an infinite softcap": lambda p: float("inf")},
    "alibi_slopes": {"slopes for one head too many": lambda p: np.full(p.q.shape[1] + 1, 0.5),
                     "a NaN slope": lambda p: np.full(p.q.shape[1], np.nan)},
    "sinks": {"sinks for one head too many": lambda p: np.zeros(p.q.shape[1] + 1),
              "a NaN sink": lambda p: np.full(p.q.shape[1], np.nan)},
    "bias": {"a bias with one key too many": lambda p: np.zeros(p.q.shape[:3] + (p.n_k + 1,)),
             "a bias one key short": lambda p: np.zeros(p.q.shape[:3] + (_bias_keys_short(p),)),
             "a bias of rank 5": lambda p: np.zeros((1,) + p.q.shape[:3] + (p.n_k,)),
             "an integer bias": lambda p: np.zeros(p.q.shape[:3] + (p.n_k,), dtype=np.int64),
             "a NaN bias": lambda p: np.full(p.q.shape[:3] + (p.n_k,), np.nan)},
}
