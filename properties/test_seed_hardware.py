"""Seed 002 § 3.2, the hardware chapter's own Python: the memory-footprint formula and the
"hardware-aware" block size (the CUDA kernels are in test_seed_kernels.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from impls.seed002_hardware import MemoryAwareAttention

torch = pytest.importorskip("torch", reason="the seed's hardware code works on torch tensors")

from impls.seed002_tiled import HardwareAwareAttention  # noqa: E402  (needs torch)


@checks("memory-footprint-formula", subject="seed002-memory-aware")
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), n_q=st.integers(1, 64), n_k=st.integers(1, 64),
       d=st.integers(1, 32), four_d=st.booleans())
def test_footprint_formula_counts_the_tensors(batch, heads, n_q, n_k, d, four_d):
    """The formula against the bytes of float32 Q, K, V and of the score tensor Q K^T actually built."""
    lead = (batch, heads) if four_d else (batch,)
    q = torch.zeros(lead + (n_q, d), dtype=torch.float32)
    k = torch.zeros(lead + (n_k, d), dtype=torch.float32)
    v = torch.zeros(lead + (n_k, d), dtype=torch.float32)
    scores = torch.matmul(q, k.transpose(-2, -1))
    actual = sum(t.numel() * t.element_size() for t in (q, k, v, scores))
    formula = MemoryAwareAttention(d_model=d, seq_len=n_q).analyze_memory_footprint(q, k, v)
    layout = "[batch, heads, seq, dim]" if four_d else "[batch, seq, dim]"
    assert formula == actual, (
        f"for {layout} inputs q {tuple(q.shape)}, k {tuple(k.shape)}: the formula gives {formula} bytes, "
        f"the tensors take {actual} (attention matrix {tuple(scores.shape)} = {scores.numel() * 4} bytes)")


@checks("hardware-aware-block-size", subject="seed002-hardware-aware-class")
@given(seq_len=st.integers(1, 4096), d_model=st.sampled_from([16, 32, 64, 128, 256, 512]))
def test_block_size_fits_the_shared_memory_it_records(seq_len, d_model):
    """Hardware-aware: a block of Q, K and V (float32) fits the shared memory the class records,
    and the choice differs between the devices the constructor distinguishes."""
    cuda = HardwareAwareAttention(d_model, seq_len, device="cuda")
    cpu = HardwareAwareAttention(d_model, seq_len, device="cpu")
    block = cuda.calculate_optimal_block_size(d_model, seq_len)
    working_set = 3 * block * d_model * 4
    assert working_set <= cuda.max_shared_memory, (
        f"seq_len={seq_len}, d_model={d_model}: block {block} needs {working_set} bytes of Q, K, V, "
        f"more than the {cuda.max_shared_memory} bytes of shared memory the class records; the cpu "
        f"instance chooses block {cpu.calculate_optimal_block_size(d_model, seq_len)} from the same "
        "inputs, so the hardware parameters are never consulted")
