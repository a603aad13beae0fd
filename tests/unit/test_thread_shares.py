"""impls/torch/thread_shares.py: the tiled FlashAttention's query blocks as one static share per torch thread, each
run with single-threaded torch operators, leaving the caller's thread settings as they were."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from impls.torch import torch_flash
from impls.torch.thread_shares import run_in_shares


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def where_it_ran(share):
    return list(share), threading.current_thread().name, torch.get_num_threads(), torch.is_grad_enabled()


def test_each_thread_takes_an_interleaved_share_with_one_torch_thread(two_threads):
    with torch.no_grad():
        shares = run_in_shares(where_it_ran, list(range(5)))
    assert [(units, threads, grad) for units, _, threads, grad in shares] == [([0, 2, 4], 1, False), ([1, 3], 1, False)]
    assert all(name.startswith("attention-share") for _, name, _, _ in shares)


def test_one_unit_one_thread_or_not_shared_runs_in_the_caller(two_threads):
    here = threading.current_thread().name
    assert run_in_shares(where_it_ran, [7]) == [([7], here, 2, True)]
    assert run_in_shares(where_it_ran, [1, 2, 3], shared=False) == [([1, 2, 3], here, 2, True)]
    torch.set_num_threads(1)
    assert run_in_shares(where_it_ran, [1, 2, 3]) == [([1, 2, 3], here, 1, True)]


def test_the_callers_thread_count_and_the_default_of_later_threads_are_kept(two_threads):
    run_in_shares(where_it_ran, list(range(4)))
    later = []
    thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert (torch.get_num_threads(), later) == (2, [2])


def test_an_error_in_a_share_is_raised_in_the_caller(two_threads):
    def fails_on_three(share):
        if 3 in share:
            raise ValueError("unit 3")
        return share

    with pytest.raises(ValueError, match="unit 3"):
        run_in_shares(fails_on_three, list(range(4)))


@pytest.mark.parametrize("kwargs", [
    dict(causal=True),
    dict(window_size=(7, 3), softcap=2.0, bias=torch.linspace(-1, 1, 45, dtype=torch.float64).reshape(1, 1, 1, 45)),
    dict(dropout_p=0.3, dropout_seed=3, alibi_slopes=torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64),
         sinks=torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64), causal=True, causal_alignment="bottom_right"),
])
def test_the_tiled_pass_in_two_shares_equals_it_in_one(two_threads, kwargs, monkeypatch):
    """Forward bit for bit (a query block is computed alike in either); the gradients to float64 rounding (dK, dV
    and dBias are summed over the shares in another order)."""
    monkeypatch.setattr(torch_flash, "SHARED_FROM_SCORES", 0)  # share this small pass too
    rng = np.random.default_rng(5)
    q, k, v, d_out = (torch.tensor(rng.normal(size=(2, 3, n, 8))) for n in (40, 45, 45, 40))
    results = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        bias = kwargs.get("bias")
        mods = kwargs if bias is None else {**kwargs, "bias": bias.clone().requires_grad_()}
        out = torch_flash.flash_attention_tiled(*leaves, block_rows=8, block_cols=16, **mods)
        out.backward(d_out)
        grads = [x.grad for x in leaves] + ([] if bias is None else [mods["bias"].grad])
        results.append((out.detach(), grads))
    (out_one, grads_one), (out_two, grads_two) = results
    assert torch.equal(out_one, out_two)
    for one, two in zip(grads_one, grads_two, strict=True):
        torch.testing.assert_close(two, one, rtol=1e-13, atol=1e-14)
