"""flash-attn's Triton backend drops the same positions on every call: its dropout seed is a constant.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. flash_attn_func's dropout_p drops each weight with probability p, at random
(flash-attn's CUDA build draws the philox seed from torch's generator). The backend's MetaData.need_dropout sets
`philox_seed, philox_offset = 0x1BF58, 0x1D4B49` on every call, whatever torch's generator holds, so every call and
every training step drops the same weights and the mean output over calls is biased. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

flash_attn_interface._flash_attn_forward.register_kernel("cpu")(flash_attn_interface._flash_attn_forward._init_fn)
q, k, v = torch.randn(3, 1, 16, 1, 16)
torch.manual_seed(1)
first = flash_attn_func(q, k, v, dropout_p=0.5)
torch.manual_seed(2)
second = flash_attn_func(q, k, v, dropout_p=0.5)
print("two calls under two seeds differ by", (first - second).abs().max().item())
assert not torch.equal(first, second), "dropout draws a new mask on each call"
