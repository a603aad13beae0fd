"""bfloat16 through the harness: the formula property, run in-process as the suite runs it, fails bfloat16
code that accumulates in bfloat16 and passes bfloat16 code that computes in float32 and rounds only what it
stores; torch tensors and NumPy arrays exchange bfloat16 bit for bit; a missing ml_dtypes is a skip reason.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.api import PropertyViolation, as_numpy, check_against_oracle, skip_unless_fits
from protocol.registry import Variant, load_impl
from specs import dtypes, regimes
from tests.fixtures import precision_variants
from tests.fixtures.standalone_repro import assert_repro_fails_alike

BFLOAT16_ONLY = {"dtypes": ("bfloat16",), "gqa": False}  # the variants take heads_kv == heads


def softmax_sum_in_bfloat16(q, k, v):
    return precision_variants.softmax_sum_in_bfloat16(q, k, v)


def output_accumulated_in_bfloat16(q, k, v):
    return precision_variants.output_accumulated_in_bfloat16(q, k, v)


def float32_inside(q, k, v):
    return precision_variants.float32_inside(q, k, v)


for _fn in (softmax_sum_in_bfloat16, output_accumulated_in_bfloat16, float32_inside):
    _fn.attention_capabilities = BFLOAT16_ONLY


def _at_length(variant: Variant) -> None:
    """What the sdpa-formula property at length runs (properties/test_regimes.py), at the first sequence length."""
    check_against_oracle(variant, skip_unless_fits(variant, regimes.SEQUENCE_LENGTHS[0]))


def _variant(name: str) -> Variant:
    return Variant(load_impl(f"tests.unit.test_bfloat16:{name}"), "bfloat16")


@pytest.mark.parametrize("name", ["softmax_sum_in_bfloat16", "output_accumulated_in_bfloat16"])
def test_accumulating_in_bfloat16_fails_the_formula_at_257_keys(name):
    """The formula against the oracle at n = 257 (specs.regimes): a sum in bfloat16 loses every term below
    2^-9 of itself, and the error grows past what the naive formula, summing in float32, gets wrong. The
    failure's repro snippet, run on its own, casts to bfloat16 as the harness did and fails the same way."""
    with pytest.raises(PropertyViolation, match=r"out differs from the float64 oracle beyond the tolerance") as failure:
        _at_length(_variant(name))
    assert_repro_fails_alike(failure.value)


def test_float32_inside_bfloat16_storage_passes_the_formula_at_length():
    _at_length(_variant("float32_inside"))


def test_torch_and_numpy_exchange_bfloat16_bit_for_bit():
    torch = pytest.importorskip("torch")
    from protocol.torch_convert import as_tensor, to_numpy

    bfloat16 = dtypes.numpy_dtype("bfloat16")
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(bfloat16)
    tensor = as_tensor(x[..., ::2])  # strided: the tensor shares the array's memory and strides
    assert tensor.stride()[-1] == 2
    assert tensor.dtype == torch.bfloat16
    assert np.array_equal(tensor.float().numpy(), x[..., ::2].astype(np.float32))
    back = as_numpy(tensor * 1)
    assert back.dtype == bfloat16 and to_numpy(tensor).tobytes() == np.ascontiguousarray(x[..., ::2]).tobytes()


def test_bfloat16_is_a_float_with_its_own_limits():
    info = dtypes.finfo("bfloat16")
    assert dtypes.is_float("bfloat16") and not dtypes.is_float("int32")
    assert math.frexp(float(info.max))[1] == math.frexp(float(np.finfo(np.float32).max))[1]  # float32's exponents
    assert float(info.eps) == 2.0**-7 and dtypes.accumulator("bfloat16") == np.float32


def test_a_missing_ml_dtypes_is_a_reason_not_an_import_error(monkeypatch):
    monkeypatch.setitem(dtypes.EXTENSION_DTYPES, "bfloat16", "no_such_package_ml_dtypes")
    reason = dtypes.missing("bfloat16")
    assert reason and "no_such_package_ml_dtypes" in reason and dtypes.missing("float16") is None
    with pytest.raises(dtypes.DtypeUnavailable, match="not installed"):
        dtypes.numpy_dtype("bfloat16")
