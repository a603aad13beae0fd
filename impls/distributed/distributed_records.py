"""The sharded records (protocol.faces' "sharded" face): our ring over the contiguous and the zigzag layout, Ulysses,
and attention over keys all-gathered (a correct sharded attention without a ring).
Each runs in the suite's process group of up to four ranks (protocol.rank_pool), float64, float32, float16 and
bfloat16, causal (top-left), GQA, n_q != n_k, d_v != d, the window and softcap, LSE and gradients."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from impls.distributed.ring import ring_face
from impls.distributed.ulysses import allgather_attention, ulysses_face
from impls.peers.availability import installed
from protocol.registry import attention_impl

SHARDED_CAPABILITIES = dict(backend="distributed", probe=installed("torch", installer="pip install torch==2.13.0"),
                            dtypes=("float64", "float32", "float16", "bfloat16"), tensors="torch", lse=True,
                            faces=("sharded",))


def _record_of(face: Callable) -> Callable:
    """A function of this module for a record (the declarations go on it, not on the shared face), with the face's
    signature and docstring."""

    def record(*args, **kwargs):
        return face(*args, **kwargs)

    record.__signature__ = inspect.signature(face)
    record.__doc__ = face.__doc__
    return record


ring = attention_impl(name="ring", sharding="contiguous", ring_merge=True, **SHARDED_CAPABILITIES)(
    _record_of(ring_face("contiguous")))
ring_zigzag = attention_impl(name="ring-zigzag", sharding="zigzag", ring_merge=True, **SHARDED_CAPABILITIES)(
    _record_of(ring_face("zigzag")))
ulysses = attention_impl(name="ulysses", sharding="contiguous", heads_divisible=True, **SHARDED_CAPABILITIES)(
    _record_of(ulysses_face()))
ring_allgather = attention_impl(name="ring-allgather", sharding="contiguous", **SHARDED_CAPABILITIES)(
    _record_of(allgather_attention))
