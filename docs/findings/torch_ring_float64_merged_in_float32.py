"""torch's ring attention merges float64 blocks in float32: float64 inputs get float32 accuracy.

Peer: torch 2.13.0, torch.distributed.tensor.experimental's context parallelism (`_templated_ring_attention`, whose
`_SDPAMerger` every rank uses). The merger's `convert_to_f32` option (always True: "It is likely this is always
True") casts every block's output and LSE to float32 before merging, whatever their dtype, and the merged output back
to the blocks' dtype: a float64 call's blocks, computed in float64 by the SDPA op, are merged in float32. Two blocks of
one float64 row merged: the output differs from the exact merge by about float32's unit roundoff, not float64's.
Status: new.
"""
import math

import torch
from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

blocks = [(torch.full((1, 1, 1, 1), 1 / 3, dtype=torch.float64), torch.tensor([[[0.1]]], dtype=torch.float64)),
          (torch.full((1, 1, 1, 1), 2 / 3, dtype=torch.float64), torch.tensor([[[0.7]]], dtype=torch.float64))]
merger = _SDPAMerger(True, seq_dim=2)
for out, lse in blocks:
    merger.step(out, lse, False)
merged, _ = merger.results()
share = 1 / (1 + math.exp(0.7 - 0.1))
exact = share / 3 + (1 - share) * 2 / 3
error = abs(merged.double().item() - exact)
print(f"merged dtype {merged.dtype}, |error| {error:.3g}")
assert error < 1e-15, "float64 blocks merged in float32"
