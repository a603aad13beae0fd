"""The dropout properties' checks read the keep mask through one-hot values (d_v >= n_k); an implementation that takes
d_v = d only (value_dim False, flash-attn's) gets problems of d = d_v = n_k, so they reach it (they raised
"one-hot values need d_v >= n_k" before), and a wrong mask is still caught there."""

from __future__ import annotations

import dataclasses

import pytest

from harness.api.evidence import PropertyViolation
from properties.dropout_checks import check_dropout_edges, check_dropout_on_weights
from protocol.registry import Variant, load_impl

FLASH = "impls.torch.torch_flash_records:flash_tiled"  # takes dropout_p; correct


def _one_head_dim(fn=None) -> Variant:
    impl = load_impl(FLASH)
    capabilities = dataclasses.replace(impl.capabilities, value_dim=False)
    return Variant(dataclasses.replace(impl, capabilities=capabilities, fn=fn or impl.fn), "float64")


@pytest.mark.parametrize("check", [check_dropout_on_weights, lambda variant: check_dropout_edges(variant, seed=7)],
                         ids=["dropout-on-weights", "dropout-keyword-domain"])
def test_an_implementation_of_one_head_dim_is_checked_and_passes(check):
    pytest.importorskip("torch")
    check(_one_head_dim())


def test_an_implementation_of_one_head_dim_without_the_rescale_is_caught():
    """Survivors left at p_ij, not p_ij / (1 - p): the survivors' comparison fails."""
    pytest.importorskip("torch")
    impl = load_impl(FLASH)

    def unscaled(q, k, v, **kwargs):
        out = impl.fn(q, k, v, **kwargs)
        return out * (1 - kwargs.get("dropout_p", 0.0))

    with pytest.raises(PropertyViolation):
        check_dropout_on_weights(_one_head_dim(unscaled))
