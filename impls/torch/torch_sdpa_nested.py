"""PyTorch SDPA on nested (jagged) tensors as a varlen record (issue 22).

torch.nested.nested_tensor_from_jagged views the packed rows with cu_seqlens as their offsets, so SDPA sees each
sequence at its own length; on torch 2.13's CPU it runs forward and backward without causal, without a mask and
without grouped kv heads (its capabilities: no `causal` keyword, gqa=False), n_q != n_k allowed. Rows past
cu_seqlens_q[-1] are 0.

Findings, and so a capability (empty_sequences=False): a pack in which a sequence has queries and no key, such as
lengths_q = [1, 1] and lengths_k = [1, 0], makes torch 2.13's jagged SDPA raise RuntimeError ("setStorage: ...
out of bounds for storage of size 1") from its math kernel, though some such packs run ([2, 2] and [2, 0]); a pack
whose sequences all have no query or all no key raises "to_padded_tensor: at least one constituent tensor should
have non-zero numel". A third, worked around below: the backward through .values() raises when the output's
gradient arrives as a view of a longer tensor (the output padded with torch.cat). tests/unit/test_sdpa_nested_finding.py
reproduces all three and fails once a torch release fixes one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from protocol.registry import attention_impl
from specs.validation import AttentionInputError, resolve_scale
from specs.varlen import check_packing


def _jagged(x: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    """(batch, heads, jagged length, dim) over the rows of x the offsets cover."""
    return torch.nested.nested_tensor_from_jagged(x[:int(cu[-1])], cu.to(torch.int64)).transpose(1, 2)


def sdpa_jagged(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *,
                scale: float | None = None) -> torch.Tensor:
    """Packed q (total_q, heads, d), k and v (total_k, heads, d / d_v) -> (total_q, heads, d_v) through SDPA on
    jagged nested tensors."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim != 3:
            raise AttentionInputError(f"{name} must be a torch tensor (total, heads, dim), got {type(x).__name__}")
    if k.shape[:2] != v.shape[:2] or k.shape[1] != q.shape[1]:
        raise AttentionInputError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must share total_k and q's heads")
    packing = check_packing(q.shape[0], k.shape[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    cu_q, cu_k = (torch.as_tensor(cu) for cu in (packing.cu_q, packing.cu_k))
    out = F.scaled_dot_product_attention(_jagged(q, cu_q), _jagged(k, cu_k), _jagged(v, cu_k),
                                         scale=resolve_scale(scale, q.shape[2]))
    values = out.transpose(1, 2).values()
    # the rows past cu_seqlens_q[-1] through F.pad, not torch.cat: autograd hands .values() the gradient of a cat as
    # a view of the longer one, and torch 2.13's jagged backward then raises (tests/unit/test_sdpa_nested_finding.py)
    return F.pad(values, (0, 0, 0, 0, 0, q.shape[0] - values.shape[0]))


# The record is declared after the definition: the body is what mutation testing must reach.
# float64 only: float32 takes the same math kernel (each dtype costs 15 s of the main job: jagged calls are slow)
sdpa_jagged = attention_impl(name="torch-sdpa-nested", backend="torch", dtypes=("float64",),
                             tensors="torch", gqa=False, empty_sequences=False, faces=("varlen",))(sdpa_jagged)
