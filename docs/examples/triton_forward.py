"""A forward-only attention kernel in Triton, as an inference library writes one for short sequences: one program
per tile of 16 queries of one (batch, head), every key in one tile, the softmax in float32."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rows(Q, K, V, Out, n_q, n_k, d, scale, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    head = tl.program_id(1)
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    keys = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    row_ok, key_ok, dim_ok = rows < n_q, keys < n_k, dims < d
    q = tl.load(Q + (head * n_q + rows[:, None]) * d + dims[None, :], mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    k = tl.load(K + (head * n_k + keys[:, None]) * d + dims[None, :], mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
    v = tl.load(V + (head * n_k + keys[:, None]) * d + dims[None, :], mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
    scores = tl.where(key_ok[None, :], tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))
    top = tl.max(scores, axis=1)
    weights = tl.exp(scores - tl.where(top == float("-inf"), 0.0, top)[:, None])  # no key: every weight 0
    total = tl.sum(weights, axis=1)
    out = tl.dot(weights / tl.where(total > 0, total, 1.0)[:, None], v, input_precision="ieee")
    tl.store(Out + (head * n_q + rows[:, None]) * d + dims[None, :], out, mask=row_ok[:, None] & dim_ok[None, :])


def attention(q, k, v, *, scale=None):
    """softmax(q k^T * scale) v for float32 tensors (batch, heads, n, d), as many kv heads as query heads."""
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    q, k, v = (x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q)
    if n_q and batch * heads:
        _rows[(triton.cdiv(n_q, 16), batch * heads)](
            q, k, v, out, n_q, n_k, d, d**-0.5 if scale is None else float(scale),
            BLOCK_N=max(16, triton.next_power_of_2(n_k)), BLOCK_D=max(16, triton.next_power_of_2(d)))
    return out


# torch tensors in and out, no backward (differentiable=False: the gradient properties skip, saying so), every key
# in one tile (max_seq: the longest sequence it is given)
attention.attention_capabilities = dict(dtypes=("float32",), tensors="torch", differentiable=False, gqa=False,
                                        value_dim=False, max_seq=128)
