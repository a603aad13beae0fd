"""An implementation that "compiles" every new shape, as jax.jit or torch.compile do (and computes in float32).

Each new (shapes, dtype, flags) key costs COMPILE_SECONDS (env ATTN_COMPILE_SECONDS) and is appended to
the file named by the environment variable ATTN_COMPILE_LOG, so a test can count the shapes a run asked for.
"""

from __future__ import annotations

import os
import time

import numpy as np

from specs.reference import attention

COMPILE_SECONDS = float(os.environ.get("ATTN_COMPILE_SECONDS", "0.05"))  # jax.jit takes ~0.3-1 s per shape
_compiled: set = set()


def _compile(key: tuple) -> None:
    if key in _compiled:
        return
    time.sleep(COMPILE_SECONDS)
    _compiled.add(key)
    log = os.environ.get("ATTN_COMPILE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{key}\n")


def jit_attention(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong as the jax.nn.dot_product_attention run of the issue was: float64 in, float32 softmax."""
    _compile((q.shape, k.shape, v.shape, str(q.dtype), causal, None if mask is None else mask.shape))
    low = attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), scale=scale,
                    causal=causal, mask=mask, finite=False).out
    return low.astype(q.dtype)


def declared_jit_attention(q, k, v, *, scale=None, causal=False, mask=None):
    return jit_attention(q, k, v, scale=scale, causal=causal, mask=mask)


declared_jit_attention.attention_capabilities = {"compiles_per_shape": True}
