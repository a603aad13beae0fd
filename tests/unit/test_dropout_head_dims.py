"""The dropout properties read the keep mask through one-hot values (d_v >= n_k); an implementation that takes
d_v = d only (value_dim False, flash-attn's) gets problems of d = d_v = n_k, so they reach it (they raised
"one-hot values need d_v >= n_k" before), and a wrong mask is still caught there."""

from __future__ import annotations

import dataclasses

import pytest

from harness.api.evidence import PropertyViolation
from properties import test_dropout as dropout
from properties import test_keyword_domain as keyword_domain
from protocol.registry import Variant, load_impl

FLASH = "impls.torch.torch_flash_records:flash_tiled"  # takes dropout_p; correct


def _one_head_dim(fn=None) -> Variant:
    impl = load_impl(FLASH)
    capabilities = dataclasses.replace(impl.capabilities, value_dim=False)
    return Variant(dataclasses.replace(impl, capabilities=capabilities, fn=fn or impl.fn), "float64")


@pytest.mark.parametrize("prop", [dropout.test_dropout_output_equals_the_oracle_under_the_recovered_mask,
                                  keyword_domain.test_dropout_edges], ids=lambda p: p.__name__)
def test_an_implementation_of_one_head_dim_is_checked_and_passes(prop):
    pytest.importorskip("torch")
    prop(_one_head_dim())


def test_an_implementation_of_one_head_dim_without_the_rescale_is_caught():
    """Survivors left at p_ij, not p_ij / (1 - p): the survivors' comparison fails."""
    pytest.importorskip("torch")
    impl = load_impl(FLASH)

    def unscaled(q, k, v, **kwargs):
        out = impl.fn(q, k, v, **kwargs)
        return out * (1 - kwargs.get("dropout_p", 0.0))

    with pytest.raises(PropertyViolation):
        dropout.test_dropout_output_equals_the_oracle_under_the_recovered_mask(_one_head_dim(unscaled))
