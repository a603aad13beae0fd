"""torch.nn.MultiheadAttention behind the protocol, through an adapter.

The adapter sets the module's input and output projections to the identity,
merges the protocol's heads into the (batch, n, heads*d) embedding the module
expects, and splits its output back, so what is checked is the module's own
head split, scaling, masking, softmax and concatenation. Its boolean masks
mean the opposite of the protocol's (True = may NOT attend), so the adapter
inverts them; causal is passed as a top-left triangular mask. The module has no
scale argument, one head count for q, k and v, and returns embed_dim features.
"""

from __future__ import annotations

import numpy as np
import torch

from impls.registry import attention_impl
from impls.torch_convert import to_torch
from impls.torch_nan_findings import nan_findings
from specs.reference import merge_heads, split_heads


def _identity_module(heads: int, embed: int, dtype: torch.dtype) -> torch.nn.MultiheadAttention:
    module = torch.nn.MultiheadAttention(embed, heads, bias=False, batch_first=True, dtype=dtype)
    eye = torch.eye(embed, dtype=dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        module.out_proj.weight.copy_(eye)
    return module.eval()


@attention_impl(name="torch-multihead-attention", backend="torch", dtypes=("float64", "float32"),
                gqa=False, value_dim=False, causal_alignment="top_left",
                known_defects=nan_findings(("float64", "float32"), drops_visible_nan=True, projects=True))
def multihead_attention_module(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    hidden = None
    if causal:
        hidden = np.triu(np.ones((n_q, n_k), dtype=bool), k=1)
    if mask is not None:
        hidden = ~np.broadcast_to(mask, (batch, heads, n_q, n_k)).reshape(batch * heads, n_q, n_k)
    Q, K, V, H = to_torch(merge_heads(q), merge_heads(k), merge_heads(v), hidden)
    module = _identity_module(heads, heads * d, Q.dtype)
    with torch.no_grad():
        out, _ = module(Q, K, V, attn_mask=H, need_weights=False)
    return split_heads(out.numpy(), heads)
