"""torch's ring attention on the CPU gives a row of zeros, not NaN, where the one key a row sees is NaN: the CPU flash
kernel each rank runs treats a row whose scores are NaN as fully masked.

Peer: torch 2.13.0, torch.distributed.tensor.experimental's ring (`_templated_ring_attention`) with
`aten._scaled_dot_product_flash_attention_for_cpu` as the op every rank runs on its blocks: a call of one position
runs on one rank, the op alone (torch-sdpa-flash-cpu declares the same of that op in float64, float32 and bfloat16;
here float16). One query, one key holding a NaN: softmax of a NaN score is NaN, the kernel returns 0. Status: known
behaviour of the CPU flash kernel (the built-in record's row), reached here through the ring.
"""
import torch

q, v = torch.ones(1, 1, 1, 8, dtype=torch.float16), torch.ones(1, 1, 1, 8, dtype=torch.float16)
k = torch.full((1, 1, 1, 8), float("nan"), dtype=torch.float16)
out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
print("row whose one key is NaN:", out[0, 0, 0, :3].tolist())
assert out.isnan().all(), "a NaN the row sees reaches its output"
