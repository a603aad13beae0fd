"""flash-attn's Triton backend gives dQ = NaN to a row whose log-sum-exp is below -88.72, and in float16 to a row
whose -lse + ln|<out, dO>| exceeds 11.09 (non-causal, n_k not a multiple of 32).

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. The dQ kernel (bwd_prefill_split) loads the keys past n_k in its last tile of
32 as zeros and weighs them by p = exp2((0 - lse) / ln 2) without masking them; dS = p (0 - D) with D = <out, dO>
then multiplies a zero key: harmless while finite, but p overflows float32 below lse = -88.72 and dS, cast to the
inputs' dtype, overflows float16 from 65520, and inf x 0 is NaN. One query, one key: the softmax weight is 1 and dQ is
exactly 0, yet float16 at lse = -10.5 with D = 16 gives NaN. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

for op in (flash_attn_interface._flash_attn_forward, flash_attn_interface._flash_attn_backward):
    op.register_kernel("cpu")(op._init_fn)
finite = {}
for dtype, lse, value in ((torch.float32, -88.0, 0.0), (torch.float32, -89.0, 0.0), (torch.float16, -10.5, 1.0)):
    q = torch.full((1, 1, 1, 16), lse / 4, dtype=dtype, requires_grad=True)  # (batch, n, heads, d); q.k / 4 = lse
    v = torch.full((1, 1, 1, 16), value, dtype=dtype)  # D = <out, dO> = 16 value
    flash_attn_func(q, torch.ones(1, 1, 1, 16, dtype=dtype), v).sum().backward()
    finite[f"{dtype} lse {lse} D {16 * value}"] = q.grad.isfinite().all().item()
print(finite)
assert all(finite.values()), "one query, one key: dQ is exactly 0"
