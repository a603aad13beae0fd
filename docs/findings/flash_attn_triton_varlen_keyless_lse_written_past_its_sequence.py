"""flash-attn's Triton backend: a causal varlen sequence with no key writes its LSE past its own rows (past the buffer).

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. flash_attn_varlen_func takes sequences of any length, a sequence with no key
included. fwd_prefill.py's early exit for a block with no visible key stores the block's LSE with the mask
`offs_m < MAX_SEQLENS_Q` where its output store uses `offs_m < seqlen_q`: max_seqlen_q entries from the sequence's
first row, into the next sequence's LSE or, for the last sequence, past the end of the LSE tensor. The interpreter
checks no bounds, so the stray store corrupts the heap and the process dies (malloc aborts); a GPU writes into
whatever follows the tensor. Status: new.
"""
import multiprocessing
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_interface, flash_attn_varlen_func

flash_attn_interface._flash_attn_varlen_forward.register_kernel("cpu")(
    flash_attn_interface._flash_attn_varlen_forward._init_fn)
q, k = torch.randn(5, 1, 16), torch.randn(4, 1, 16)  # sequences of (4 queries, 4 keys) and (1 query, 0 keys)
cu_q, cu_k = torch.tensor([0, 4, 5], dtype=torch.int32), torch.tensor([0, 4, 4], dtype=torch.int32)
calls = [lambda: flash_attn_varlen_func(q, k, k, cu_q, cu_k, 4, 4, causal=True) for _ in range(20)]
child = multiprocessing.get_context("fork").Process(target=lambda: [call() for call in calls])  # its own heap
child.start()
child.join()
assert child.exitcode == 0, f"the call killed its process (exit code {child.exitcode})"
