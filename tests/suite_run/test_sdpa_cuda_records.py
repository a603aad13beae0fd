"""The torch SDPA CUDA records (impls/torch/torch_sdpa_cuda.py): declared as intended, listed as not run (with a
reason naming CUDA) where there is no device, and the adaptations they make to each backend's limits (padded
head dims, flash's causal split, the mask folding, cuDNN's extra key) checked on the CPU: the device is
swapped for "cpu" and each pinned call for one to MATH that first asserts the backend's constraints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend

import impls.torch.torch_sdpa_cuda as sdpa_cuda
from harness.api.assertions import assert_within
from impls.records import BUILTIN_TARGETS, builtin_impls
from protocol.registry import load_impl
from specs.tolerance import forward_allowance
from tests.fixtures.runs import run_suite

RECORDS = {
    "torch-sdpa-cuda-flash": ("impls.torch.torch_sdpa_cuda:sdpa_cuda_flash", SDPBackend.FLASH_ATTENTION),
    "torch-sdpa-cuda-efficient": ("impls.torch.torch_sdpa_cuda:sdpa_cuda_efficient", SDPBackend.EFFICIENT_ATTENTION),
    "torch-sdpa-cuda-cudnn": ("impls.torch.torch_sdpa_cuda:sdpa_cuda_cudnn", SDPBackend.CUDNN_ATTENTION),
}
DECLARED = {  # name: (dtypes, mask, dropout, value_dim)
    "torch-sdpa-cuda-flash": (("float16", "bfloat16"), False, True, False),
    "torch-sdpa-cuda-efficient": (("float32", "float16", "bfloat16"), True, True, True),
    "torch-sdpa-cuda-cudnn": (("float16", "bfloat16"), True, False, True),
}
no_device = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the records can run")


@pytest.mark.parametrize("name", RECORDS)
def test_the_record_loads_with_its_declared_capabilities(name):
    impl = load_impl(RECORDS[name][0])
    dtypes, mask, dropout, value_dim = DECLARED[name]
    caps = impl.capabilities
    assert impl.name == name and impl.backend == "torch" and RECORDS[name][0] in BUILTIN_TARGETS
    assert caps.dtypes == dtypes and caps.tensors == "torch" and caps.gradients
    assert (caps.mask, caps.dropout, caps.value_dim) == (mask, dropout, value_dim)
    assert caps.scale and caps.causal and caps.causal_alignment == "top_left"
    assert caps.gqa and caps.cross and caps.fused and not caps.dropout_seed and not caps.backward


@no_device
@pytest.mark.parametrize("name", RECORDS)
def test_without_a_device_the_record_is_listed_as_not_run_with_a_reason_naming_cuda(name):
    impl = load_impl(RECORDS[name][0])
    assert impl.unavailable and "CUDA" in impl.unavailable
    if torch.version.cuda is None:
        assert f"torch {torch.__version__} was built without CUDA" in impl.unavailable
    ready, missing = builtin_impls(("torch",))
    assert name not in {i.name for i in ready}
    assert [m.reason for m in missing if m.target == RECORDS[name][0]] == [impl.unavailable]


@no_device
def test_a_run_naming_them_skips_each_property_with_the_reason():
    targets = [arg for target, _ in RECORDS.values() for arg in ("--impl", target)]
    run = run_suite("properties/test_formula.py", "-rs", *targets)
    assert run.returncode == 0, run.output  # every property skipped, none failed
    assert "SKIPPED" in run.output and "no selected implementation can run here" in run.output
    assert "passed" not in run.output and "failed" not in run.output
    for target, _ in RECORDS.values():
        assert f"not run here: {target} (no CUDA device" in run.output, run.output


@no_device
def test_a_run_selecting_none_of_the_properties_still_says_why_they_are_not_run():
    run = run_suite("properties/test_formula.py", "-k", "sdpa-cuda")
    assert "deselected" in run.output
    for target, _ in RECORDS.values():
        assert f"not run here: {target} (no CUDA device" in run.output, run.output


def _checked_math(calls: list):
    """A stand-in for the pinned call: asserts what `backend` accepts, then computes with MATH."""

    def run(backend, q, k, v, *, scale, causal, mask, dropout_p):
        calls.append((backend, tuple(q.shape), tuple(k.shape), causal, None if mask is None else tuple(mask.shape)))
        assert q.shape[-1] % 8 == 0 and v.shape[-1] % 8 == 0, "head dims padded to a multiple of 8"
        assert all(x.stride(-1) == 1 for x in (q, k, v))
        if backend == SDPBackend.FLASH_ATTENTION:
            assert mask is None and q.shape[-1] == v.shape[-1]
            assert not causal or q.shape[2] == k.shape[2], "flash takes is_causal only when n_q == n_k"
        if backend == SDPBackend.CUDNN_ATTENTION:
            assert k.shape[2] != 1, "cuDNN rejects a single key"
        assert not (causal and mask is not None), "torch's documentation: not both"
        assert mask is None or mask.dim() == 4
        with torch.nn.attention.sdpa_kernel(SDPBackend.MATH):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal, scale=scale,
                enable_gqa=q.shape[1] != k.shape[1])

    return run


SHAPES = [  # heads, heads_kv, n_q, n_k, d, d_v
    (2, 2, 5, 5, 3, 3), (4, 2, 3, 9, 12, 12), (3, 1, 9, 4, 5, 5), (2, 2, 6, 1, 8, 8), (2, 1, 1, 7, 16, 16),
]


@pytest.mark.parametrize("name", RECORDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_the_adaptations_compute_attention_within_the_backends_limits(monkeypatch, name, shape, causal, masked):
    target, backend = RECORDS[name]
    _, mask_kw, _, value_dim = DECLARED[name]
    if masked and not mask_kw:
        pytest.skip("no mask keyword")
    heads, heads_kv, n_q, n_k, d, d_v = shape
    if value_dim:
        d_v = d + 3
    calls = []
    monkeypatch.setattr(sdpa_cuda, "DEVICE", "cpu")
    monkeypatch.setattr(sdpa_cuda, "pinned_sdpa", _checked_math(calls))
    rng = np.random.default_rng(sum(shape))
    q, k, v = (rng.standard_normal(s) for s in ((2, heads, n_q, d), (2, heads_kv, n_k, d), (2, heads_kv, n_k, d_v)))
    mask = rng.random((2, 1, n_q, n_k)) < 0.7 if masked else None
    kwargs = {"causal": causal} | ({"mask": torch.from_numpy(mask)} if masked else {})
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    out = load_impl(target).fn(tq, tk, tv, **kwargs)
    expected, allowance = forward_allowance(q, k, v, dtype="float64", causal=causal, mask=mask)
    hidden = ~np.isfinite(expected.lse)  # fully masked rows: MATH's additive -inf mask gives NaN there
    got = np.where(hidden[..., None], expected.out, out.detach().numpy())
    assert_within(got, expected.out, allowance, what=f"{name} on the CPU stand-in")
    out.masked_fill(torch.from_numpy(hidden)[..., None], 0).sum().backward()
    assert [x.grad.shape for x in (tq, tk, tv)] == [t.shape for t in (tq, tk, tv)]
    assert all(c[0] == backend for c in calls)
    if name == "torch-sdpa-cuda-flash" and causal and n_q != n_k:
        assert len(calls) == (2 if n_q > n_k else 1)
