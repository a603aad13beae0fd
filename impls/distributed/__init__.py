"""Attention sharded across processes (issue 39): ring (contiguous and zigzag) and Ulysses over torch.distributed,
with our tiled FlashAttention inside each rank, and their records."""
