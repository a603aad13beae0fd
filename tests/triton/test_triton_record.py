"""The Triton FlashAttention records beyond the properties: the interpreter is chosen without a GPU, the margins
show a load or a store past a tensor (the interpreter checks no bounds), the dropout mask is specs.dropout_mask's,
tiles below 16 are refused, and the zoo's changed copies follow the kernels' file."""

from __future__ import annotations

import math

import numpy as np
import pytest

triton = pytest.importorskip("triton")
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from impls.triton.guarded_buffers import StorePastOutput, check_margins, guarded_copy, guarded_empty  # noqa: E402
from impls.triton.triton_flash import triton_attention  # noqa: E402
from protocol.triton_interpreter import interpreting  # noqa: E402
from specs.dropout_mask import keep_mask  # noqa: E402
from specs.validation import AttentionInputError  # noqa: E402
from zoo import wrong_triton  # noqa: E402
from zoo.triton_copies import changed_kernels  # noqa: E402


def _inputs(n_q=37, n_k=45, d=16, d_v=16, heads=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, n_q, d, generator=generator), torch.randn(1, heads, n_k, d, generator=generator),
            torch.randn(1, heads, n_k, d_v, generator=generator))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the kernels run natively")
def test_the_kernels_run_under_the_interpreter_without_a_gpu():
    assert interpreting()
    assert type(triton_attention.__globals__["flash_kernels"].flash_forward).__name__ == "InterpretedFunction"


def test_a_margin_written_is_a_store_past_the_output():
    out = guarded_empty((2, 3), torch.float32, margin=4)
    out.fill_(1.0)
    check_margins("out", out, 4)  # the tensor itself may be written
    torch.as_strided(out, (1,), (1,), out.storage_offset() + out.numel()).fill_(0.0)
    with pytest.raises(StorePastOutput, match=r"stored past its output out \(2, 3\): 1 elements after it"):
        check_margins("out", out, 4)


def test_a_copy_reads_nan_past_its_end():
    x = guarded_copy(torch.arange(4.0), margin=3)
    past = torch.as_strided(x, (x.numel() + 3,), (1,), x.storage_offset())
    assert torch.equal(past[:4], torch.arange(4.0)) and torch.isnan(past[4:]).all()


def test_an_unmasked_store_past_the_last_query_tile_is_reported():
    q, k, v = _inputs()
    with pytest.raises(StorePastOutput, match="stored past its output out"):
        wrong_triton.triton_output_store_unmasked(q, k, v, block_rows=16, block_cols=16)


def test_an_unmasked_load_past_the_last_key_tile_reads_nan():
    q, k, v = _inputs(n_k=45)
    assert torch.isnan(wrong_triton.triton_value_load_unmasked(q, k, v, block_rows=16, block_cols=16)).any()
    q, k, v = _inputs(n_k=48)  # no partial key tile: nothing past the end is read
    assert torch.isfinite(wrong_triton.triton_value_load_unmasked(q, k, v, block_rows=16, block_cols=16)).all()


@pytest.mark.parametrize("blocks", [(16, 16), (32, 17)])
def test_the_dropout_mask_is_the_specified_one_for_any_tiles(blocks):
    """q = 0 gives every key the weight 1 / n_k, and one-hot values read each weight back: out_ij = keep_ij /
    (n_k (1 - p))."""
    n_q, n_k, p, seed = 19, 23, 0.3, 987654321
    q = torch.zeros(2, 2, n_q, 16)
    k = torch.randn(2, 1, n_k, 16)
    v = torch.eye(n_k).expand(2, 1, n_k, n_k).contiguous()
    out = triton_attention(q, k, v, dropout_p=p, dropout_seed=seed, block_rows=blocks[0], block_cols=blocks[1])
    keep = np.rint(out.numpy() * n_k * (1 - p)).astype(bool)
    np.testing.assert_allclose(out.numpy(), keep / (n_k * (1 - p)), rtol=1e-6)
    assert np.array_equal(keep, keep_mask(seed, p, (2, 2, n_q, n_k)))


def test_the_lse_is_minus_infinity_and_the_output_zero_for_a_row_without_keys():
    q, k, v = _inputs(n_q=20, n_k=4)
    out, lse = triton_attention(q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True,
                                block_rows=16, block_cols=16)
    assert torch.equal(out[:, :, :16], torch.zeros_like(out[:, :, :16])) and (lse[:, :, :16] == -math.inf).all()
    assert torch.isfinite(lse[:, :, 16:]).all()


@pytest.mark.parametrize("keyword", ["block_rows", "block_cols"])
def test_tiles_below_sixteen_are_refused_by_name(keyword):
    q, k, v = _inputs()
    with pytest.raises(AttentionInputError, match=rf"{keyword}=8: the kernels' tiles are at least 16"):
        triton_attention(q, k, v, **{keyword: 8})


def test_float64_is_refused_by_name():
    q, k, v = (x.double() for x in _inputs())
    with pytest.raises(AttentionInputError, match=r"q has dtype torch\.float64; the Triton kernels take float32"):
        triton_attention(q, k, v)


def test_a_change_whose_text_is_gone_fails_loudly():
    with pytest.raises(RuntimeError, match=r"occurs 0 times in flash_kernels\.py"):
        changed_kernels("gone", (("no such text in the kernels", ""),))


@triton.jit
def _store_as_bfloat16(source, target, size: tl.constexpr):
    offsets = tl.arange(0, size)
    tl.store(target + offsets, tl.load(source + offsets).to(tl.bfloat16))


# 1 + 2^-7 + 2^-8 + 2^-9 lies nearer 1 + 2^-6 than 1 + 2^-7, bfloat16's neighbours; 4.08e-41, a float32 subnormal,
# lies nearer 0 than 9.18e-41, bfloat16's smallest subnormal
CONVERTED = torch.tensor([1 + 2**-7 + 2**-8 + 2**-9, 4.08e-41])


@pytest.mark.skipif(not interpreting(), reason="natively a GPU converts to bfloat16 by rounding to nearest")
def test_the_interpreter_truncates_to_bfloat16_and_misconverts_subnormals():
    """Why bfloat16 never enters an interpreted kernel (impls/triton/triton_flash.py): the interpreter's own
    conversion truncates and turns a subnormal into another number. Fails once the pinned Triton converts
    correctly: then the record may pass bfloat16 to its kernels again."""
    stored = torch.empty(2, dtype=torch.bfloat16)
    _store_as_bfloat16[(1,)](CONVERTED, stored, size=2)
    rounded = CONVERTED.to(torch.bfloat16)
    assert rounded.tolist() == [1 + 2**-6, 0.0]
    assert stored[0].item() == 1 + 2**-7 and stored[1].item() > 1e-39


@pytest.mark.parametrize("gaps", [(3.0, 5.0, 8.0), (88.0, 90.0, 95.0)])
def test_a_bfloat16_output_is_the_float32_result_rounded_to_nearest(gaps):
    """The kernels widen bfloat16 on load and work in float32, so the bfloat16 output is the float32 call's on the
    same values, rounded to nearest: ordinary weights, and weights e^-88 to e^-95 read back through one-hot values
    (float32 subnormals, of which bfloat16 keeps some and rounds e^-95 to 0)."""
    q, k, v = (x.to(torch.bfloat16) for x in _inputs(n_q=21, n_k=19, d=16, d_v=16))
    out = triton_attention(q, k, v, block_rows=16, block_cols=16)
    assert torch.equal(out, triton_attention(q.float(), k.float(), v.float(), block_rows=16, block_cols=16)
                       .to(torch.bfloat16))
    scores = torch.tensor([0.0, *(-g for g in gaps)])  # one query, keys one-hot in d: q . k_j is scores[j]
    q = (2.0 * scores).reshape(1, 1, 1, 4).to(torch.bfloat16)  # the scale 1 / sqrt(4) brings 2 s back to s
    k = torch.eye(4).reshape(1, 1, 4, 4).to(torch.bfloat16)
    out = triton_attention(q, k, k, block_rows=16, block_cols=16)
    exact = torch.softmax(scores.double(), dim=0).float().to(torch.bfloat16)
    assert torch.equal(out[0, 0, 0], exact), (out[0, 0, 0].tolist(), exact.tolist())
