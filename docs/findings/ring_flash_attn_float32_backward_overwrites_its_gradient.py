"""ring-flash-attn's backward is wrong for float32 inputs: dQ errs by the size of the gradient itself.

Peer: ring-flash-attn 0.1.8 over flash-attn 2.8.3.post2's Triton backend (under triton 3.6.0's interpreter on the CPU),
two ranks over gloo. ring_flash_attn_backward keeps dq = block_dq_buffer.to(torch.float32), which for float32 inputs
is the buffer itself, not a copy; the next step's flash-attn backward writes its block's dQ into that buffer, and
`dq += block_dq_buffer` then doubles it: a rank that computes more than one key block returns twice the share of the
last one (deviation dq-accumulator-aliases-step-buffer predicts it element by element; the returned dQ is also rounded
to bfloat16, `dq.to(torch.bfloat16)`, for every dtype). float16 inputs are copied by .to() and come out right but for
that rounding. The zigzag and stripe backwards keep dq the same way (`dq_buffer.to(torch.float32)`). Status: new.
"""
import os
import sys
from unittest import mock

import torch


def rank_main(rank, errors):
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29517", rank=rank, world_size=2)
    from flash_attn import flash_attn_interface as fa
    [op.register_kernel("cpu")(op._init_fn) for op in (fa._flash_attn_forward, fa._flash_attn_backward)]
    sys.modules["ring_flash_attn.adapters"] = mock.MagicMock()  # its transformers adapters (they need transformers)
    from ring_flash_attn import ring_flash_attn_func
    q, k, v = (torch.randn(1, 8, 1, 16, generator=torch.Generator().manual_seed(i)).requires_grad_() for i in range(3))
    mine = [x.detach()[:, 4 * rank:4 * rank + 4].requires_grad_() for x in (q, k, v)]  # its 4 of 8 positions
    ring_flash_attn_func(*mine).sum().backward()
    torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).sum().backward()
    errors[rank] = (mine[0].grad - q.grad[:, 4 * rank:4 * rank + 4]).abs().max()


os.environ.update(TRITON_INTERPRET="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")
errors = torch.zeros(2).share_memory_()
torch.multiprocessing.start_processes(rank_main, args=(errors,), nprocs=2, start_method="fork")
assert errors.max() < 1e-4, f"dQ of float32 inputs is wrong: largest |error| per rank {errors.tolist()}"
