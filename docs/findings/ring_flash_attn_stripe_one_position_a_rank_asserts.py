"""ring-flash-attn's stripe attention raises a bare AssertionError where each rank holds one position of a causal
call, a sequence it otherwise shards (n = W: one position a rank).

Peer: ring-flash-attn 0.1.8 over flash-attn 2.8.3.post2's Triton backend (under triton 3.6.0's interpreter on the
CPU), two ranks over gloo. stripe_flash_attn_forward runs the steps after a rank's own (rank 0's step 1 here) on its
query rows but the first and the keys but the last, q[:, 1:] and k[:, :-1]: with one position a rank both are empty,
and flash-attn's forward asserts on them. The ranks without such a step (the last) return; two positions a rank run
(deviation raises-on-empty-ring-block: a raise on a rank with an empty block, and on no call whose blocks all hold a
position). Status: new.
"""
import os
import sys
from unittest import mock

import torch


def rank_main(rank, asserted):
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29531", rank=rank, world_size=2)
    from flash_attn import flash_attn_interface as fa
    [op.register_kernel("cpu")(op._init_fn) for op in (fa._flash_attn_forward, fa._flash_attn_backward)]
    sys.modules["ring_flash_attn.adapters"] = mock.MagicMock()  # its transformers adapters (they need transformers)
    from ring_flash_attn import stripe_flash_attn_func
    q, k, v = (torch.randn(1, 2, 1, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    try:  # rank r holds positions r, r + 2, ...: one each
        stripe_flash_attn_func(*(x[:, rank::2] for x in (q, k, v)), causal=True)
    except AssertionError:
        asserted[rank] = 1


os.environ.update(TRITON_INTERPRET="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")
asserted = torch.zeros(2).share_memory_()
torch.multiprocessing.start_processes(rank_main, args=(asserted,), nprocs=2, start_method="fork")
assert not asserted.any(), f"causal attention of two positions on two ranks asserted on ranks {asserted.nonzero()}"
