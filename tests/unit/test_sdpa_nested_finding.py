"""Findings of the varlen properties on torch 2.13 (impls/torch/torch_sdpa_nested.py): SDPA on jagged nested
tensors raises when a sequence has queries and no key (for some packs), and when every sequence has no query; its
backward through the output's .values() raises when the gradient arrives as a view of a longer tensor (the output
padded with torch.cat). The record declares empty_sequences=False for the first two and pads with F.pad for the
third; these tests fail once torch fixes one (then the capability or the workaround goes)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")


def _jagged_sdpa(lengths_q: list[int], lengths_k: list[int]) -> torch.Tensor:
    def nested(lengths: list[int], dim: int) -> torch.Tensor:
        values = torch.randn(sum(lengths), 1, dim, dtype=torch.float64)
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        return torch.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nn.functional.scaled_dot_product_attention(nested(lengths_q, 2), nested(lengths_k, 2),
                                                                nested(lengths_k, 2))


@pytest.mark.parametrize(("lengths_q", "lengths_k"), [([1, 1], [1, 0]), ([1, 1], [0, 1]), ([2, 1], [0, 1])])
def test_jagged_sdpa_raises_on_a_sequence_without_keys(lengths_q, lengths_k):
    with pytest.raises(RuntimeError, match=r"setStorage: .* out of bounds"):
        _jagged_sdpa(lengths_q, lengths_k)


def test_jagged_sdpa_raises_when_no_sequence_has_a_query():
    with pytest.raises(RuntimeError, match="to_padded_tensor: at least one constituent tensor should have non-zero"):
        _jagged_sdpa([0, 0], [2, 1])


def test_jagged_sdpa_runs_packs_where_every_sequence_has_keys():
    out = _jagged_sdpa([1, 3, 2], [2, 1, 4])
    assert out.transpose(1, 2).values().shape == (6, 1, 2)


def test_jagged_sdpa_backward_raises_through_a_cat_of_its_values():
    offsets = torch.tensor([0, 1, 2, 3])
    q, k, v = (torch.randn(3, 1, 2, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = [torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2) for x in (q, k, v)]
        values = torch.nn.functional.scaled_dot_product_attention(*nested).transpose(1, 2).values()
    padded = torch.cat([values, values.new_zeros((3, 1, 2))])
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly to"):
        padded[1:2].sum().backward()
    values = torch.nn.functional.scaled_dot_product_attention(*nested).transpose(1, 2).values()
    torch.nn.functional.pad(values, (0, 0, 0, 0, 0, 3))[1:2].sum().backward()  # the record's way: no error
    assert q.grad is not None and torch.isfinite(q.grad).all()
