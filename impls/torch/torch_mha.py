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

import torch

from protocol.registry import attention_impl


def _identity_module(heads: int, embed: int, dtype: torch.dtype) -> torch.nn.MultiheadAttention:
    module = torch.nn.MultiheadAttention(embed, heads, bias=False, batch_first=True, dtype=dtype)
    eye = torch.eye(embed, dtype=dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        module.out_proj.weight.copy_(eye)
    return module.eval()


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads, n, d) -> (batch, n, heads*d), the module's embedding."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


@attention_impl(name="torch-multihead-attention", backend="torch", dtypes=("float64", "float32"),
                gqa=False, value_dim=False, causal_alignment="top_left", tensors="torch")
def multihead_attention_module(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    hidden = None
    if causal:
        hidden = torch.ones((n_q, n_k), dtype=torch.bool).triu(1)
    if mask is not None:
        hidden = ~mask.broadcast_to((batch, heads, n_q, n_k)).reshape(batch * heads, n_q, n_k)
    module = _identity_module(heads, heads * d, q.dtype)
    out, _ = module(_merge_heads(q), _merge_heads(k), _merge_heads(v), attn_mask=hidden, need_weights=False)
    return out.reshape(batch, n_q, heads, d).transpose(1, 2)
