"""torch's own ring attention (torch.distributed.tensor.experimental's context parallelism) on the CPU, through the
one route that works there: its private `_templated_ring_attention` with the CPU SDPA op inside.

Why this route (torch 2.13.0, gloo on the loopback; issue 39): the public `context_parallel()` dispatches only the CUDA
SDPA ops to its ring. On the CPU a causal call raises "Operator aten._scaled_dot_product_flash_attention_for_cpu
.default does not have a sharding strategy registered", a non-causal one is computed right but not through the ring
and its backward raises, and the math backend's causal path mixes torch.Tensor and DTensor. The template the CUDA
handlers call is device-free: it rotates the key and value blocks (by all-gather, torch's default) and merges each
block's (out, lse) in float32 (out - sigmoid(lse_b - lse) (out - out_b), lse - logsigmoid(lse - lse_b)); given
`aten._scaled_dot_product_flash_attention_for_cpu` as its op it is torch's ring on this machine. It is private and
tied to the pinned torch: the probe names the module it needs.

Its documented semantics: q, k, v (batch, heads, n_local, d) on every rank, each rank's shard in the layout its load
balancer expects: without load balancing, contiguous; with it (causal only: torch raises "Load balancing requires
`is_causal=True`" otherwise), the round-robin head-tail layout, chunks r and 2W - 1 - r (the protocol's zigzag). The
blocks are all-gathered and halved with torch's `chunk`, so every shard must have one length (even_shards); causal
needs n_q = n_k ("is_causal requires the same query and context sequence lengths"), so the records take one length
(cross=False). The CPU op takes one head count and one head dim for q, k and v (gqa and value_dim False), `scale`
(None: 1/sqrt(d)), and no mask. Forward only: the template's backward calls the CUDA flash backward's signature.
Both records declare ring_merge: each rank merges the blocks the ring brings, one at a time.
"""

from __future__ import annotations

import importlib.util

from impls.peers.availability import installed
from protocol.registry import attention_impl

TEMPLATE = "torch.distributed.tensor.experimental._context_parallel._attention"


def _probe() -> str | None:
    missing = installed("torch", installer="pip install torch==2.13.0")()
    if missing:
        return missing
    if importlib.util.find_spec(TEMPLATE) is None:
        return f"{TEMPLATE} is not in this torch (the private ring template of torch 2.13.0)"
    return None


def _cpu_flash(q, k, v, *, is_causal: bool, scale: float | None):
    """The template's op: the CPU SDPA kernel, (out, lse) with lse (batch, heads, n)."""
    import torch

    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, bool(is_causal), scale=scale)


def _ring_face(load_balance: bool):
    """The sharded face of torch's ring, with its load balancer (head-tail layout, causal calls) or without."""

    def torch_ring_attention(q, k, v, *, group, scale=None, causal=False, return_lse=False):
        """torch's ring attention of this rank's shards (the module's docstring)."""
        import importlib

        template = importlib.import_module(TEMPLATE)
        options = template._cp_options
        saved = (options.enable_load_balance, options.rotate_method)
        options.enable_load_balance = load_balance and bool(causal)  # torch refuses load balancing without causal
        options.rotate_method = template._RotateMethod.ALL_GATHER
        try:
            out, lse = template._templated_ring_attention(group, 2, _cpu_flash, q, k, v, is_causal=bool(causal),
                                                          scale=scale)[:2]
        finally:
            options.enable_load_balance, options.rotate_method = saved
        out = out.to(q.dtype)
        return (out, lse) if return_lse else out

    torch_ring_attention.__qualname__ = f"torch_ring_attention_{'head_tail' if load_balance else 'contiguous'}"
    return torch_ring_attention


TORCH_RING = dict(backend="peers", dtypes=("float64", "float32", "float16", "bfloat16"), tensors="torch",
                  causal_alignment="top_left", cross=False, gqa=False, value_dim=False, lse=True, even_shards=True,
                  ring_merge=True, differentiable=False, faces=("sharded",), probe=_probe)


def _record_of(face):
    """A function of this module for a record, calling the shared face (the declarations go on it)."""

    def record(q, k, v, *, group, scale=None, causal=False, return_lse=False):
        return face(q, k, v, group=group, scale=scale, causal=causal, return_lse=return_lse)

    record.__doc__ = face.__doc__
    return record


torch_ring = attention_impl(name="torch-ring", sharding="contiguous", **TORCH_RING)(_record_of(_ring_face(False)))
torch_ring_head_tail = attention_impl(name="torch-ring-head-tail", sharding="zigzag", **TORCH_RING)(
    _record_of(_ring_face(True)))
