"""Gradients from an implementation, however it offers them (Capabilities.gradients).

tensors="torch": q, k, v become leaf tensors that require grad (sharing the arrays' values and strides), and so do
the modification arrays asked for (`wrt`); the output's vector-Jacobian product with d_out is taken by
torch.autograd. fn.attention_backward: called with the
NumPy arrays and d_out. Either way the result is (dq, dk, dv) as NumPy, checked for type, shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.engine.guarded_call import CallFailed, call_in_process, checked_array, handed_over


def _autograd(fn: Callable, wrt: tuple[str, ...]) -> Callable:
    def gradients(q, k, v, d_out, **kwargs):
        import torch

        from protocol.torch_convert import as_tensor

        leaves = [as_tensor(x).clone().requires_grad_(True) for x in (q, k, v)]
        _, kwargs = handed_over((), kwargs, "torch")  # the mask and the modification arrays as tensors
        kwargs.update({name: kwargs[name].clone().requires_grad_(True) for name in wrt})
        leaves += [kwargs[name] for name in wrt]
        out = fn(*leaves[:3], **kwargs)
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            raise CallFailed(f"returned a {type(out).__name__} that autograd cannot reach (no grad_fn): "
                             "tensors='torch' promises a differentiable output", "output")
        grads = torch.autograd.grad(out, leaves, grad_outputs=as_tensor(d_out).to(out.device), allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves, strict=True))

    return gradients


def backward_of(impl, q: np.ndarray, k: np.ndarray, v: np.ndarray, d_out: np.ndarray, *, wrt: tuple[str, ...] = (),
                **kwargs) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv) of <d_out, impl(q, k, v, **kwargs)>, and the gradient of each keyword array named in `wrt` (the
    modification arrays of Capabilities.differentiable_mods, through autograd), in the inputs' dtype, under the
    call's time limit; CallFailed (CONTRACT 1's rules) when the implementation raises or returns something else."""
    caps = impl.capabilities
    if not caps.gradients:
        raise ValueError(f"{impl.name}: {caps.lacking('gradients')}")
    undeclared = [name for name in wrt if name not in caps.differentiable_mods]
    if undeclared:
        raise ValueError(f"{impl.name}: autograd does not reach {undeclared} (differentiable_mods "
                         f"{caps.differentiable_mods})")
    backward = _autograd(impl.fn, wrt) if caps.tensors == "torch" else impl.fn.attention_backward
    grads = call_in_process(lambda *arrays, **kw: backward(*arrays, d_out, **kw), (q, k, v), kwargs)
    expected = (q, k, v, *(kwargs[name] for name in wrt))
    if not isinstance(grads, tuple | list) or len(grads) != len(expected):
        raise CallFailed(f"the backward returned {type(grads).__name__}, not (dq, dk, dv)", "output")
    return tuple(checked_array(g, shape=np.shape(x), dtype=x.dtype, what=name)
                 for g, x, name in zip(grads, expected, ("dq", "dk", "dv", *(f"d{n}" for n in wrt)), strict=True))
