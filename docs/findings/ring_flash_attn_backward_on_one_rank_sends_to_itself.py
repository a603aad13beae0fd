"""ring-flash-attn's backward fails on a process group of one rank: gloo raises "Pair is not connected".

Peer: ring-flash-attn 0.1.8 over flash-attn 2.8.3.post2's Triton backend (under triton 3.6.0's interpreter on the CPU),
one rank over gloo. The forward guards its sends (`if step + 1 != world_size`), so it runs; ring_flash_attn_backward
ends every step with `d_kv_comm.send_recv_kv(dk, dv)` unguarded, and on one rank that is a send to itself, which
gloo refuses. zigzag_ring_flash_attn_func's backward of a causal call of one position fails before that send: it
halves the rank's cotangent (dout.chunk(2, dim=1)[1]), and one position has no second half (an IndexError). A ring of
one is attention on one device: it should run, or be refused by name. Status: new.
"""
import os
import sys
from unittest import mock

import torch


def rank_main(rank, errors):
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=rank, world_size=1)
    from flash_attn import flash_attn_interface as fa
    [op.register_kernel("cpu")(op._init_fn) for op in (fa._flash_attn_forward, fa._flash_attn_backward)]
    sys.modules["ring_flash_attn.adapters"] = mock.MagicMock()  # its transformers adapters (they need transformers)
    from ring_flash_attn import ring_flash_attn_func
    out = ring_flash_attn_func(*(torch.randn(1, 4, 1, 16).requires_grad_() for _ in range(3)))  # the forward runs
    try:
        out.sum().backward()
    except RuntimeError as exc:
        errors[rank] = str(exc).splitlines()[0]


os.environ.update(TRITON_INTERPRET="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")
errors = torch.multiprocessing.Manager().dict()
torch.multiprocessing.start_processes(rank_main, args=(errors,), nprocs=1, start_method="fork")
assert not errors, f"the backward on one rank raised: {dict(errors)}"
