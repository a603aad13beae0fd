"""Implementations in torch: SDPA per backend, nn.MultiheadAttention, the project's tiled
FlashAttention (forward, backward, dropout) and its records."""
