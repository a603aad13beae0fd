"""Every dense property reaches a varlen or kv-cache implementation (issue 22): the dense call adapted into its face.

dense -> varlen: the dense batch's sequences are packed among decoy sequences, one before each and one after the
last (lengths drawn from the shapes, 0 and 1 among them, so a pack is never of equal lengths), with NaN rows
after cu_seqlens[-1] and, where the implementation takes seqused_k, NaN keys past each sequence's used ones. The
decoys' outputs are checked against the float64 oracle within the tolerance model in the same call (a decoy with
no key must return exactly 0): an implementation right only when all lengths are equal, or that reads past a
sequence, fails every property it meets, with FaceCheckFailed naming the decoy.

dense -> kv cache: each sequence's keys and values are laid in a cache that starts at a left padding (where the
implementation takes cache_leftpad) and ends in spare slots; the last min(n_q, n_k) keys arrive as new keys to
append at cache_seqlens. Unused slots, padding and pages hold NaN; with cache_batch_idx, sequences map to cache
rows in reverse order among spare rows of finite values; with block_table, pages lie shuffled in a pool of
`page_size` slots (a tile keyword of the adapter, 16 by default) with spare NaN pages and out-of-range entries
past each sequence's pages. One decoy sequence follows the dense batch's, DECOY_EXTRA_KEYS keys longer (the
dense sequences' slots past their keys hold NaN there), so the cache's sequences never share one length; its output
is checked as a varlen decoy's. After the call the cache must equal the expected append bit for bit, or
FaceCheckFailed names the first differing slot. A cache cannot hold keys and values of different lengths or heads:
such dense inputs are rejected here (specs.validation.check_shapes), before the call.

Both work on NumPy arrays and on torch tensors (Capabilities.tensors), so autograd reaches q, k and v through the
pack.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import numpy as np

from specs.kv_cache import UNUSED_SLOTS, build_cache
from specs.tolerance import ToleranceUndefined, forward_allowance
from specs.validation import check_shapes

DECOY_LENGTHS = ((1, 0), (0, 1), (1, 1), (3, 7), (9, 2), (2, 12), (5, 5))  # (n_q, n_k) of the decoys, in turn
NAN_TAIL = 3  # rows past cu_seqlens[-1]
UNUSED_KEYS = 2  # keys past seqused_k
DEFAULT_PAGE_SIZE = 16
ORACLE_KEYWORDS = ("scale", "causal", "window_size", "softcap", "alibi_slopes", "sinks")


ADAPTER_FILLS = ("cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table", "seqused_k")


def _lse_keyword(return_lse: bool) -> dict:
    return {"return_lse": True} if return_lse else {}


class FaceCheckFailed(AssertionError):
    """A dense call adapted into a face found the implementation wrong where the dense output cannot show it."""


class _Kind:
    """NumPy or torch: the few operations a pack needs, on the arrays' own kind."""

    def __init__(self, like: object) -> None:
        self.torch = type(like).__module__.startswith("torch")

    def native(self, a: np.ndarray, like: object = None):
        if not self.torch:
            return a
        from protocol.torch_convert import as_tensor

        return as_tensor(np.ascontiguousarray(a))

    def numpy(self, x) -> np.ndarray:
        if not type(x).__module__.startswith("torch"):
            return np.asarray(x)
        from protocol.torch_convert import to_numpy

        return to_numpy(x)

    def cat(self, parts: list):
        if self.torch:
            import torch

            return torch.cat(parts)
        return np.concatenate(parts)

    def stack(self, parts: list):
        if self.torch:
            import torch

            return torch.stack(parts)
        return np.stack(parts)


def _oracle_kwargs(kwargs: dict, kind: _Kind) -> dict:
    return {name: kind.numpy(value) if type(value).__module__.startswith("torch") else value
            for name, value in kwargs.items() if name in ORACLE_KEYWORDS}


_DECOYS_CHECKED: ContextVar[bool] = ContextVar("decoys_checked", default=True)


@contextlib.contextmanager
def unchecked_decoys() -> Iterator[None]:
    """Inside: the decoys still run through the implementation, their outputs unchecked. For a measurement of the
    implementation's own memory: a check holds the oracle's n_q x n_k matrices of the kv-cache decoy, whose length
    follows the dense call's."""
    token = _DECOYS_CHECKED.set(False)
    try:
        yield
    finally:
        _DECOYS_CHECKED.reset(token)


def _filled(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _check_decoy(index: int, got: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype: np.dtype,
                 alignment: str, kwargs: dict, within: str = "pack") -> None:
    """One decoy's output (n_q, heads, d_v) against the oracle, within the tolerance model; `within` names where
    the decoy lies (a pack, a cache); none inside unchecked_decoys()."""
    if not len(q) or not _DECOYS_CHECKED.get():
        return
    if not len(k):
        if np.any(got != 0):
            raise FaceCheckFailed(f"decoy sequence {index} of the {within} has no key, but its output is not 0: "
                                  f"{got.reshape(-1)[:4]}")
        return
    dense = (np.ascontiguousarray(x.transpose(1, 0, 2), dtype=np.float64)[None] for x in (q, k, v))
    try:
        oracle, allowance = forward_allowance(*dense, dtype=dtype, causal_alignment=alignment, **kwargs)
    except ToleranceUndefined:
        return
    error = np.abs(got.astype(np.float64) - oracle.out[0].transpose(1, 0, 2))
    bound = np.broadcast_to(np.asarray(allowance.bound, np.float64), oracle.out.shape)[0].transpose(1, 0, 2)
    bad = ~(error <= bound)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise FaceCheckFailed(f"decoy sequence {index} of the {within} (n_q={len(q)}, n_k={len(k)}) differs from the "
                              f"float64 oracle beyond the tolerance at out[{at}]: {got[at]!r}, expected "
                              f"{oracle.out[0].transpose(1, 0, 2)[at]!r}, allowed {bound[at]:.3g}")


def through_varlen(fn: Callable, alignment: str, seqused_k: bool, empty: bool = True) -> Callable:
    """The dense face of a varlen function (the module's docstring); empty=False (Capabilities.empty_sequences)
    gives every decoy at least one query and one key."""

    def dense(q, k, v, *, return_lse: bool = False, **kwargs):
        kind = _Kind(q)
        batch, heads, n_q, d = q.shape
        heads_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
        dtype = kind.numpy(q[:0]).dtype
        rng = np.random.default_rng([batch, heads, heads_kv, n_q, n_k, d, d_v])
        decoys = [(m, n) if empty else (max(m, 1), max(n, 1))
                  for m, n in (DECOY_LENGTHS[i % len(DECOY_LENGTHS)] for i in range(batch + 1))]
        decoy_q = [_filled(rng, (m, heads, d), dtype) for m, _ in decoys]
        decoy_k = [_filled(rng, (m, heads_kv, d), dtype) for _, m in decoys]
        decoy_v = [_filled(rng, (m, heads_kv, d_v), dtype) for _, m in decoys]
        unused = UNUSED_KEYS if seqused_k else 0
        pieces_q, pieces_k, pieces_v, lengths_q, lengths_k, used = [], [], [], [], [], []
        for i in range(2 * batch + 1):
            if i % 2 == 0:
                j = i // 2
                pieces_q.append(kind.native(decoy_q[j]))
                pieces_k.append(kind.native(decoy_k[j]))
                pieces_v.append(kind.native(decoy_v[j]))
                lengths_q.append(decoys[j][0])
                lengths_k.append(decoys[j][1])
                used.append(decoys[j][1])
                continue
            b = i // 2
            pieces_q.append(q[b].transpose(0, 1) if kind.torch else q[b].swapaxes(0, 1))
            for pieces, x, dim in ((pieces_k, k, d), (pieces_v, v, d_v)):
                pieces.append(x[b].transpose(0, 1) if kind.torch else x[b].swapaxes(0, 1))
                pieces.append(kind.native(np.full((unused, heads_kv, dim), np.nan, dtype)))
            lengths_q.append(n_q)
            lengths_k.append(n_k + unused)
            used.append(n_k)
        for pieces, width, dim in ((pieces_q, heads, d), (pieces_k, heads_kv, d), (pieces_v, heads_kv, d_v)):
            pieces.append(kind.native(np.full((NAN_TAIL, width, dim), np.nan, dtype)))
        cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lengths_q, lengths_k))
        packed_kwargs = dict(kwargs)
        slopes = kwargs.get("alibi_slopes")
        if slopes is not None and len(slopes.shape) == 2:  # one row per sequence: the decoys' are 0.25
            rows = [kind.native(np.full((1, heads), 0.25, kind.numpy(slopes).dtype))]
            for b in range(batch):
                rows += [slopes[b:b + 1], rows[0]]
            packed_kwargs["alibi_slopes"] = kind.cat(rows)
        if seqused_k:
            packed_kwargs["seqused_k"] = kind.native(np.asarray(used, np.int32))
        result = fn(kind.cat(pieces_q), kind.cat(pieces_k), kind.cat(pieces_v), kind.native(cu_q),
                    kind.native(cu_k), max(lengths_q), max(lengths_k), **_lse_keyword(return_lse), **packed_kwargs)
        out, lse = result if return_lse else (result, None)
        if not kwargs.get("dropout_p"):
            checked = _oracle_kwargs(kwargs, kind)
            for j in range(batch + 1):
                rows = slice(int(cu_q[2 * j]), int(cu_q[2 * j + 1]))
                decoy_kwargs = dict(checked)
                if slopes is not None and len(slopes.shape) == 2:
                    decoy_kwargs["alibi_slopes"] = np.full(heads, 0.25)
                _check_decoy(2 * j, kind.numpy(out[rows]), decoy_q[j], decoy_k[j], decoy_v[j], dtype, alignment,
                             decoy_kwargs)
        starts = [int(cu_q[2 * b + 1]) for b in range(batch)]
        dense_out = kind.stack([out[s:s + n_q] for s in starts])
        dense_out = dense_out.transpose(1, 2) if kind.torch else dense_out.swapaxes(1, 2)
        if not return_lse:
            return dense_out
        return dense_out, kind.stack([lse[:, s:s + n_q] for s in starts])

    return dense


def _first_difference(got: np.ndarray, expected: np.ndarray) -> tuple[int, ...] | None:
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    return None if same.all() else tuple(int(i) for i in np.argwhere(~same)[0])


DECOY_EXTRA_KEYS = 3  # the kv-cache adapter's decoy sequence holds this many keys more than the dense ones


def through_kvcache(fn: Callable, leftpad: bool, batch_idx: bool, paged: bool,
                    alignment: str = "bottom_right") -> Callable:
    """The dense face of a kv-cache function (the module's docstring): the dense batch's sequences and one decoy
    sequence of DECOY_EXTRA_KEYS more keys after them, so the cache's sequences have unequal logical lengths; the
    decoy's output is checked against the float64 oracle in the same call."""

    def dense(q, k, v, *, return_lse: bool = False, page_size: int = DEFAULT_PAGE_SIZE, **kwargs):
        kind = _Kind(q)
        qn, kn, vn = (kind.numpy(x) for x in (q, k, v))
        shape = check_shapes(qn, kn, vn, finite=False)  # a cache cannot hold keys and values of other lengths
        batch, n_k = shape.batch, shape.n_k
        rng = np.random.default_rng([batch, shape.heads, shape.heads_kv, shape.n_q, n_k, shape.d, shape.d_v])
        decoy_q = _filled(rng, (1, shape.heads, shape.n_q, shape.d), qn.dtype)
        decoy_k, decoy_v = (_filled(rng, (1, shape.heads_kv, n_k + DECOY_EXTRA_KEYS, dim), qn.dtype)
                            for dim in (shape.d, shape.d_v))
        longer = [np.concatenate([x, np.full(x.shape[:2] + (DECOY_EXTRA_KEYS,) + x.shape[3:], np.nan, x.dtype)],
                                 axis=2) for x in (kn, vn)]
        laid = (np.concatenate([qn, decoy_q]), np.concatenate([longer[0], decoy_k]),
                np.concatenate([longer[1], decoy_v]))
        built = build_cache(*laid, lengths_k=[n_k] * batch + [n_k + DECOY_EXTRA_KEYS],
                            n_new=min(shape.n_q, n_k), leftpad=[b % 3 for b in range(batch + 1)] if leftpad else None,
                            spare_rows=UNUSED_SLOTS if batch_idx and not paged else None,
                            page_size=page_size if paged else None, seed=n_k)
        expected = built.expected_caches()
        k_cache, v_cache = (kind.native(c) for c in (built.k_cache, built.v_cache))
        keywords = {name: kind.native(value) for name, value in built.keywords.items()}
        call_kwargs = dict(kwargs)
        slopes = kwargs.get("alibi_slopes")
        if slopes is not None and len(slopes.shape) == 2:  # one row per sequence: the decoy's are 0.25
            call_kwargs["alibi_slopes"] = kind.cat([slopes, kind.native(np.full((1, shape.heads), 0.25,
                                                                                kind.numpy(slopes).dtype))])
        result = fn(kind.native(built.q), k_cache, v_cache, kind.native(built.k), kind.native(built.v),
                    **_lse_keyword(return_lse), **keywords, **call_kwargs)
        for name, cache, want in (("k_cache", k_cache, expected[0]), ("v_cache", v_cache, expected[1])):
            at = _first_difference(kind.numpy(cache), want)
            if at is not None:
                raise FaceCheckFailed(f"{name}{list(at)} after the call is {kind.numpy(cache)[at]!r}, expected "
                                      f"{want[at]!r}: the new keys belong at slots cache_seqlens.. of their "
                                      "sequence, and nothing else may change")
        out, lse = result if return_lse else (result, None)
        if not kwargs.get("dropout_p"):
            decoy_kwargs = _oracle_kwargs(kwargs, kind)
            if slopes is not None and len(slopes.shape) == 2:
                decoy_kwargs["alibi_slopes"] = np.full(shape.heads, 0.25)
            _check_decoy(batch, kind.numpy(out[batch]), decoy_q[0].swapaxes(0, 1), decoy_k[0].swapaxes(0, 1),
                         decoy_v[0].swapaxes(0, 1), qn.dtype, alignment, decoy_kwargs, "cache")
        out = out[:batch]
        out = out.transpose(1, 2) if kind.torch else out.swapaxes(1, 2)
        return (out, lse[:batch]) if return_lse else out

    return dense


def dense_signature(fn: Callable, face: str, tile_keywords: tuple[str, ...]) -> inspect.Signature:
    """The adapted function's signature: q, k, v, then the face function's keyword-only parameters but those the
    adapter fills (page_size, the adapter's own, where the face is paged)."""
    positional = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("q", "k", "v")]
    keywords = [p for name, p in inspect.signature(fn).parameters.items()
                if p.kind == p.KEYWORD_ONLY and name not in ADAPTER_FILLS]
    if face == "kvcache" and "page_size" in tile_keywords:
        keywords.append(inspect.Parameter("page_size", inspect.Parameter.KEYWORD_ONLY, default=DEFAULT_PAGE_SIZE))
    return inspect.Signature(positional + keywords)


def dense_through(face: str, fn: Callable, *, alignment: str, features: dict[str, bool],
                  tile_keywords: tuple[str, ...]) -> Callable:
    """fn's dense face, through the adapter of `face`, with a dense signature."""
    if face == "varlen":
        adapted = through_varlen(fn, alignment, features["seqused_k"], features["empty_sequences"])
    else:
        adapted = through_kvcache(fn, features["cache_leftpad"], features["cache_batch_idx"],
                                  features["block_table"], alignment)
    adapted.__signature__ = dense_signature(fn, face, tile_keywords)
    adapted.__doc__ = f"{fn.__qualname__}'s {face} face, called with dense problems (protocol.dense_adapters)."
    adapted.__wrapped_face__ = fn
    return adapted
