"""The score modifications are capabilities only where the signature names their keywords (protocol.registry):
a function that forwards **kwargs has the seeds' keywords, not these, and none of them can be declared."""

from __future__ import annotations

import pytest

from protocol.registry import SCORE_MODS, ImplLoadError, load_impl

FIXTURES = "tests/fixtures/score_mod_impls.py"


def test_named_keywords_are_capabilities():
    caps = load_impl(f"{FIXTURES}:names_every_modification").capabilities
    assert all(getattr(caps, mod) for mod in SCORE_MODS)


def test_forwarded_keywords_are_the_seeds_only():
    caps = load_impl(f"{FIXTURES}:forwards_keywords").capabilities
    assert caps.scale and caps.causal and caps.mask
    assert not any(getattr(caps, mod) for mod in SCORE_MODS)
    assert caps.lacking("window_size") == "implementation lacks 'window_size' (no `window_size` keyword named in " \
                                          "the signature)"


def test_a_modification_cannot_be_declared():
    with pytest.raises(ImplLoadError, match=r"unknown capabilities \['bias'\]"):
        load_impl(f"{FIXTURES}:declares_bias")


@pytest.mark.parametrize("name", ["bias_gradient_without_torch", "sinks_gradient_not_named"])
def test_a_differentiable_modification_needs_autograd_and_its_keyword(name):
    """differentiable_mods promises gradients of named modification arrays through autograd: without tensors='torch'
    or without the keyword in the signature it cannot be kept, and loading says so."""
    with pytest.raises(ImplLoadError, match=r"differentiable_mods \['(bias|sinks)'\]: each must be one of"):
        load_impl(f"{FIXTURES}:{name}")


def test_sdpa_math_declares_the_bias_gradient_and_flash_does_not():
    assert load_impl("impls.torch.torch_sdpa:sdpa_math").capabilities.differentiable_mods == ("bias",)
    assert load_impl("impls.torch.torch_sdpa:sdpa_flash_cpu").capabilities.differentiable_mods == ()
