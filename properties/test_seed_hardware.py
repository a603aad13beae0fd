"""Seed 002 § 3.2, the hardware chapter's own Python: the memory-footprint formula, the memory the
"memory-optimised" blockwise classes hold, and the "hardware-aware" block size (the CUDA kernels and
the GPU constants are in test_seed_kernels.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.peak_memory import growth

torch = pytest.importorskip("torch", reason="the seed's hardware code works on torch tensors")

from impls.seeds.seed_code.seed002_blockwise import HardwareAwareAttention  # noqa: E402  (needs torch)
from properties.seed_hardware_checks import (  # noqa: E402
    BLOCKWISE,
    DEVICES,
    QUADRATIC_GROWTH,
    SEED_FORMULA,
    SIZES,
    block_overflow,
    blockwise_peaks,
    dtype_blindness,
    footprint_shortfall,
    hardware_blindness,
    layout_mismatch,
    quadratic_memory,
    seed_tensors,
)


@checks("memory-footprint-formula", subject="seed002-memory-aware-class")
@given(batch=st.integers(1, 3), **SIZES)
def test_footprint_counts_what_attention_holds(batch, n_q, n_k, d):
    """In the seed's own convention and dtype: float32 (batch, seq, d_model)."""
    shortfall = footprint_shortfall(SEED_FORMULA, *seed_tensors((batch,), n_q, n_k, d))
    assert shortfall is None, shortfall


@checks("memory-footprint-formula", subject="seed002-memory-aware-class")
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
@given(batch=st.integers(1, 3), **SIZES)
def test_footprint_follows_the_dtype(dtype, batch, n_q, n_k, d):
    shapes = ((batch, n_q, d), (batch, n_k, d), (batch, n_k, d))
    blindness = dtype_blindness(SEED_FORMULA, shapes, dtype)
    assert blindness is None, blindness


@checks("memory-footprint-formula", subject="seed002-memory-aware-class")
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), **SIZES)
def test_footprint_of_the_four_d_layout(batch, heads, n_q, n_k, d):
    mismatch = layout_mismatch(SEED_FORMULA, *seed_tensors((batch, heads), n_q, n_k, d))
    assert mismatch is None, mismatch


@checks("blockwise-classes-memory-linear", subject="seed002-blockwise-classes")
@pytest.mark.parametrize("name", sorted(BLOCKWISE))
def test_blockwise_memory_grows_linearly(name):
    peaks = blockwise_peaks()
    control = growth(peaks["control"])
    assert control < QUADRATIC_GROWTH, (
        f"the measurement cannot tell linear from quadratic memory here: the linear control grew {control:.2f}x "
        f"({peaks['control']} bytes)")
    verdict = quadratic_memory(name, peaks[name], control)
    assert verdict is None, verdict


@checks("hardware-aware-block-size", subject="seed002-hardware-aware-class")
def test_block_size_depends_on_the_hardware():
    blindness = hardware_blindness()
    assert blindness is None, blindness


@checks("hardware-aware-block-size", subject="seed002-hardware-aware-class")
@given(seq_len=st.integers(1, 4096), d_model=st.sampled_from([16, 32, 64, 128, 256, 512]),
       device=st.sampled_from(DEVICES))
def test_block_fits_the_shared_memory_it_records(seq_len, d_model, device):
    overflow = block_overflow(HardwareAwareAttention(d_model, seq_len, device=device), d_model, seq_len)
    assert overflow is None, overflow
