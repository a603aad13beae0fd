"""xformers' split-k decoding operator refuses causal masks over more than 16 queries, causal sequences of unequal
query lengths and a strided last dimension.

Peer: xformers 0.0.35, `xformers.ops.fmha.triton_splitk.FwOp`, checked under triton 3.6.0's interpreter on the CPU
(XFORMERS_ENABLE_TRITON=1). The protocol asks for causal attention at any length and for any strides; this decoding
kernel's own `not_supported_reasons` refuse them (its smallest BLOCK_M is 16), so memory_efficient_attention
dispatches such calls to another operator on a GPU. Status: documented by the operator (not_supported_reasons).
"""
import os

import torch

os.environ.update(XFORMERS_ENABLE_TRITON="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")  # flash-attn: no CUDA build
from xformers.ops.fmha import attn_bias, common, triton_splitk

q, k = torch.randn(1, 34, 2, 16, dtype=torch.float16), torch.randn(1, 64, 2, 16, dtype=torch.float16)
mask = attn_bias.BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens([17, 17], kv_padding=32, kv_seqlen=[32, 32])
unequal = attn_bias.BlockDiagonalCausalWithOffsetGappyKeysMask.from_seqlens([1, 2], [0, 32, 64], [32, 32])
strided = torch.randn(1, 34, 2, 32, dtype=torch.float16)[..., ::2]
calls = (common.Inputs(q, k, k, attn_bias=mask), common.Inputs(q[:, :3], k, k, attn_bias=unequal),
         common.Inputs(strided, k, k))
reasons = [r for inputs in calls for r in triton_splitk.FwOp.not_supported_reasons(inputs) if r[:7] != "device="]
print("\n".join(reasons))
assert not reasons, "causal attention of 17 queries a sequence, of 1 and 2 queries, and q with a stride of 2"
