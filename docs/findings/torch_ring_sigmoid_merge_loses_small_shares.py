"""torch's ring attention merges partial results in a form that rounds at the size of the partial outputs, not of
their shares: a block whose share is below float32's unit roundoff contributes exactly nothing, and the merge's error
can pass the forward tolerance where the rows' values differ in size.

Peer: torch 2.13.0, `_SDPAMerger` of torch.distributed.tensor.experimental's ring attention. Each step computes
out - sigmoid(lse_b - lse) (out - out_b) and lse - logsigmoid(lse - lse_b) in float32. Where the running result's share
is e^-20 (2.1e-9), sigmoid(20) rounds to 1 and out - 1 (out - out_b) = out_b exactly: the running output, here the
one-hot weight of a key that no mask hides, is dropped. The weighted form exp(lse_a - lse) out_a + exp(lse_b - lse)
out_b keeps it (about 2.1e-9, far above float32's smallest normal). Status: new.
"""
import torch
from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

first = (torch.tensor([[[[1.0, 0.0]]]]), torch.tensor([[[0.0]]]))  # a block whose one key is key 0
second = (torch.tensor([[[[0.0, 1.0]]]]), torch.tensor([[[20.0]]]))  # key 1's block, e^20 times the weight
merger = _SDPAMerger(True, seq_dim=2)
for out, lse in (first, second):
    merger.step(out, lse, False)
merged, lse = merger.results()
weighted = torch.exp(first[1] - lse)[..., None] * first[0] + torch.exp(second[1] - lse)[..., None] * second[0]
print(f"weight of key 0: sigmoid form {merged[0, 0, 0, 0].item():.3g}, weighted form {weighted[0, 0, 0, 0].item():.3g}")
assert merged[0, 0, 0, 0] > 0, "a key no mask hides gets weight exactly 0"
