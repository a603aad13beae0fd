"""ring-flash-attn's float16 backward returns NaN for a dQ that is 0: each key block's share is held in float16.

Peer: ring-flash-attn 0.1.8 over flash-attn 2.8.3.post2's Triton backend (under triton 3.6.0's interpreter on the CPU),
two ranks over gloo. ring_flash_attn_backward has every step's flash-attn backward write its block's dQ share into
block_dq_buffer, allocated in q's dtype, and only then adds it to a float32 dq. Here every key is the same, so each
row's dQ is exactly 0, but the two blocks' shares are +-70,711 (scale 1/sqrt(2), keys 500, values +-400): float16
holds neither (its largest is 65,504), the buffer takes +inf and then -inf, and dq is NaN. A backward that sums the
shares in float32 before rounding (flash-attn's own on one device) returns 0. Declared within
dq-accumulator-aliases-step-buffer, whose re-enactment holds each share in the inputs' dtype. Status: new.
"""
import os
import sys
from unittest import mock

import torch


def rank_main(rank, results):
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=2)
    from flash_attn import flash_attn_interface as fa
    [op.register_kernel("cpu")(op._init_fn) for op in (fa._flash_attn_forward, fa._flash_attn_backward)]
    sys.modules["ring_flash_attn.adapters"] = mock.MagicMock()  # its transformers adapters (they need transformers)
    from ring_flash_attn import ring_flash_attn_func
    e0 = torch.tensor([1.0, 0.0]).repeat(1, 4, 1, 1)  # (batch, positions, heads, head dim): 4 positions of (1, 0)
    q, k, v = e0, 500 * e0, 400 * e0 * torch.tensor([1.0, 1.0, -1.0, -1.0]).reshape(1, 4, 1, 1)
    mine = [x[:, 2 * rank:2 * rank + 2].half().requires_grad_() for x in (q, k, v)]  # its 2 of 4 positions
    ring_flash_attn_func(*mine).backward(e0[:, :2].half())
    results[rank] = mine[0].grad.float().abs().max()


os.environ.update(TRITON_INTERPRET="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")
results = torch.zeros(2).share_memory_()
torch.multiprocessing.start_processes(rank_main, args=(results,), nprocs=2, start_method="fork")
assert torch.isfinite(results).all(), f"dQ is 0 on every row; the ring's largest |dQ| per rank: {results.tolist()}"
