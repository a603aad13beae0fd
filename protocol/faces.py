"""CONTRACT 1's faces (issue 22): the call signatures an implementation may offer besides the dense one.

- "dense": fn(q, k, v, *, scale, causal, mask, ...) with q (batch, heads, n_q, d), the seeds' face.
- "varlen": fn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale, causal, ...) with packed
  q (total_q, heads, d), k and v (total_k, heads_kv, d / d_v) (specs.varlen); returns (total_q, heads, d_v), and
  with return_lse=True (out, lse) with lse (heads, total_q), FlashAttention's varlen layout. `seqused_k`, where
  the signature names it, is a feature.
- "kvcache": fn(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, scale, causal, ...) with q (batch, n_q, heads,
  d) (specs.kv_cache); returns (batch, n_q, heads, d_v), and (out, lse) with lse (batch, heads, n_q); writes the
  new keys and values into the cache in place. `cache_batch_idx`, `cache_leftpad`, `block_table` and `num_splits`
  are features where the signature names them; causal is aligned bottom-right; forward only.
- "sharded": fn(q, k, v, *, group, scale, causal, ...) run in each of W processes joined in the torch.distributed
  process group `group` (protocol.rank_pool), q, k and v that rank's shards (batch, heads, n_local, d) in the layout
  it declares (Capabilities.sharding, specs.sharding: contiguous, zigzag or stripe); returns that rank's output shard,
  and (out, lse) with lse (batch, heads, n_local); torch tensors, autograd within the rank (what crosses ranks is the
  implementation's to differentiate). The suite gives W = 1 to 4 (its adapter keyword `world_size`); n need not be
  divisible by W unless the implementation declares even_shards.

An implementation lists its faces in the capability `faces` (default ("dense",)). The function itself offers the
first; each further face is an attribute of it, `fn.attention_varlen` or `fn.attention_kvcache`. The suite adapts
every dense problem into the first face when it is not dense (protocol.dense_adapters), so every dense property
reaches a varlen or kv-cache implementation; the faces' own properties call each face directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from specs.kv_cache import KVCACHE_KEYWORDS
from specs.varlen import VARLEN_ARGUMENTS

FACES = ("dense", "varlen", "kvcache", "sharded")
FACE_POSITIONAL = {"dense": ("q", "k", "v"), "varlen": ("q", "k", "v", *VARLEN_ARGUMENTS),
                   "kvcache": ("q", "k_cache", "v_cache"), "sharded": ("q", "k", "v")}
FACE_ATTRIBUTES = {"varlen": "attention_varlen", "kvcache": "attention_kvcache", "sharded": "attention_sharded"}
# features a face has where its function's signature names the keyword
FACE_FEATURES = {"varlen": ("seqused_k",), "kvcache": tuple(k for k in KVCACHE_KEYWORDS if k != "cache_seqlens")}
FEATURE_KEYWORDS = tuple(feature for features in FACE_FEATURES.values() for feature in features)
DENSE_ONLY = ("mask", "bias")  # per-element arrays of the dense face: a pack or a cache has no such axes


class FaceError(ValueError):
    """An implementation's faces do not follow the protocol."""


def check_faces(faces: object, target: str) -> tuple[str, ...]:
    if isinstance(faces, str) or not isinstance(faces, tuple | list) or not faces:
        raise FaceError(f"{target}: faces must be a non-empty tuple of {FACES}, got {faces!r}")
    unknown = [f for f in faces if f not in FACES]
    if unknown or len(set(faces)) != len(faces):
        raise FaceError(f"{target}: faces {tuple(faces)} must be distinct names among {FACES}")
    return tuple(faces)


def _parameters(fn: Callable, target: str, face: str) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as exc:
        raise FaceError(f"{target}: cannot read the {face} face's signature ({exc})") from None


def face_functions(fn: Callable, faces: tuple[str, ...], target: str) -> dict[str, Callable]:
    """Each face's function: fn for the first, fn.attention_<face> for the others; their signatures checked."""
    functions = {faces[0]: fn}
    for face in faces[1:]:
        attribute = FACE_ATTRIBUTES.get(face)
        extra = getattr(fn, attribute, None) if attribute else None
        if not callable(extra):
            where = f"fn.{attribute}" if attribute else "a function of its own (the dense face is fn itself)"
            raise FaceError(f"{target}: declares the {face} face after {faces[0]!r} but has no {where}")
        functions[face] = extra
    for face, function in functions.items():
        params = _parameters(function, target, face)
        positional = [name for name, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        expected = FACE_POSITIONAL[face]
        if face != "dense" and tuple(positional[:len(expected)]) != expected:
            raise FaceError(f"{target}: the {face} face takes {', '.join(expected)} positionally, in that order; "
                            f"signature is {inspect.signature(function)}")
        if face == "sharded" and "group" not in params:
            raise FaceError(f"{target}: the sharded face takes the process group as the keyword `group`; "
                            f"signature is {inspect.signature(function)}")
        wrong = [name for name in DENSE_ONLY if face != "dense" and name in params]
        if wrong:
            raise FaceError(f"{target}: {wrong} belong to the dense face only (a per-element array has no axes in "
                            f"a {face} call)")
    return functions


def face_features(functions: dict[str, Callable]) -> dict[str, bool]:
    """The faces' keyword features: each named in its face's signature."""
    return {feature: face in functions and feature in inspect.signature(functions[face]).parameters
            for face, features in FACE_FEATURES.items() for feature in features}
