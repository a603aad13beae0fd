"""The public faces of the project's FlashAttention (impls.torch.torch_flash): seed 000's flash_attention in
[batch, heads, seq_len, dim] and flash-attn's flash_attn_func in [batch, seq_len, heads, dim]."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specs.dropout_mask import check_dropout, drop_probability, keep_mask
from specs.validation import AttentionInputError
from tests.fixtures.runs import ROOT

torch = pytest.importorskip("torch")


def _qkv(b=2, h=4, h_kv=2, n_q=37, n_k=53, d=16, d_v=8, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, h, n_q, d), (b, h_kv, n_k, d), (b, h_kv, n_k, d_v))
    return [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=grad) for s in shapes]


def test_import_impls_does_not_import_torch():
    code = "import sys, impls; assert 'torch' not in sys.modules; from impls import flash_attention; " \
           "assert 'torch' in sys.modules; print(flash_attention.__module__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "impls.torch.torch_flash", done.stderr


def test_the_two_faces_agree_forward_and_backward_with_dropout():
    from impls import flash_attention, flash_attn_func

    q, k, v = _qkv(grad=True)
    out, lse = flash_attention(q, k, v, 0.3, 0.7, causal=True, causal_alignment="bottom_right", dropout_seed=5,
                               return_lse=True)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    qs, ks, vs = (x.detach().transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
    out_s, lse_s = flash_attn_func(qs, ks, vs, 0.3, 0.7, causal=True, dropout_seed=5, return_lse=True)
    grads_s = torch.autograd.grad(out_s.sum(), (qs, ks, vs))
    assert out_s.shape == (2, 37, 4, 8)
    assert torch.equal(out_s.transpose(1, 2), out) and torch.equal(lse_s, lse)
    for g, g_s in zip(grads, grads_s, strict=True):
        assert torch.equal(g_s.transpose(1, 2), g)


def test_swapped_layouts_give_other_numbers_and_a_named_layout_is_required():
    from impls import flash_attention

    q, k, v = _qkv(h=16, h_kv=16, n_q=16, n_k=16, d=8, d_v=8)
    assert not torch.allclose(flash_attention(q, k, v), flash_attention(q, k, v, layout="bshd"))
    with pytest.raises(AttentionInputError, match="layout must be one of"):
        flash_attention(q, k, v, layout="bsdh")


def test_the_lse_is_differentiable_and_its_gradient_is_the_weights():
    from impls.torch.torch_flash import flash_attention_tiled

    q, k, v = _qkv(grad=True)
    _, lse = flash_attention_tiled(q, k, v, block_rows=5, block_cols=7, return_lse=True)
    (d_q,) = torch.autograd.grad(lse.sum(), (q,))
    scale = q.shape[-1] ** -0.5
    weights = torch.softmax(q @ k.repeat_interleave(2, 1).transpose(-1, -2) * scale, -1)
    expected = scale * weights @ k.repeat_interleave(2, 1)
    assert torch.allclose(d_q, expected, rtol=0, atol=1e-13)  # float64: sums of 53 terms of size <= 1


@pytest.mark.parametrize("bad, message", [
    (dict(block_rows=0), "block_rows must be a positive int"),
    (dict(dropout_p=1.0), r"dropout_p must be a number in \[0, 1\)"),
    (dict(dropout_p=0.1, dropout_seed=-1), "dropout_seed must be an int"),
    (dict(causal=True, causal_alignment="middle"), "causal_alignment must be one of"),
    (dict(mask=torch.ones(3, 3)), "mask must be a boolean torch tensor"),
])
def test_bad_arguments_are_named(bad, message):
    from impls.torch.torch_flash import flash_attention_tiled

    with pytest.raises(AttentionInputError, match=message):
        flash_attention_tiled(*_qkv(), **bad)


def test_numpy_inputs_are_refused_with_the_reason():
    from impls.torch.torch_flash import flash_attention_tiled

    with pytest.raises(AttentionInputError, match="q must be a torch tensor, got ndarray"):
        flash_attention_tiled(np.zeros((1, 1, 2, 2)), *_qkv()[1:])


def test_the_dropout_mask_is_a_pure_function_of_seed_and_position():
    whole = keep_mask(3, 0.25, (2, 3, 40, 50))
    block = keep_mask(3, 0.25, (2, 3, 7, 11), row_offset=13, column_offset=29)
    assert np.array_equal(block, whole[:, :, 13:20, 29:40])
    assert not np.array_equal(whole, keep_mask(4, 0.25, whole.shape))
    assert abs(drop_probability(0.1) - 0.1) < 2**-25 and drop_probability(0.0) == 0.0
    assert keep_mask(2**64 - 1, 0.5, (1, 1, 2, 2)).shape == (1, 1, 2, 2)
    with pytest.raises(AttentionInputError):
        check_dropout(0.5, 2**64)
