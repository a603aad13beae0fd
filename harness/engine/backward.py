"""Gradients from an implementation, however it offers them (Capabilities.gradients).

tensors="torch": q, k, v become leaf tensors that require grad (sharing the arrays' values and strides), the
output's vector-Jacobian product with d_out is taken by torch.autograd. fn.attention_backward: called with the
NumPy arrays and d_out. Either way the result is (dq, dk, dv) as NumPy, checked for type, shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.engine.guarded_call import CallFailed, call_in_process, checked_array


def _autograd(fn: Callable) -> Callable:
    def gradients(q, k, v, d_out, **kwargs):
        import torch

        from protocol.torch_convert import as_tensor

        leaves = [as_tensor(x).clone().requires_grad_(True) for x in (q, k, v)]
        mask = kwargs.get("mask")
        if isinstance(mask, np.ndarray):
            kwargs = {**kwargs, "mask": as_tensor(mask)}
        out = fn(*leaves, **kwargs)
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            raise CallFailed(f"returned a {type(out).__name__} that autograd cannot reach (no grad_fn): "
                             "tensors='torch' promises a differentiable output", "output")
        grads = torch.autograd.grad(out, leaves, grad_outputs=as_tensor(d_out).to(out.device), allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves, strict=True))

    return gradients


def backward_of(impl, q: np.ndarray, k: np.ndarray, v: np.ndarray, d_out: np.ndarray,
                **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of <d_out, impl(q, k, v, **kwargs)>, in the inputs' dtype, under the call's time limit;
    CallFailed (CONTRACT 1's rules) when the implementation raises or returns something else."""
    caps = impl.capabilities
    if not caps.gradients:
        raise ValueError(f"{impl.name}: {caps.lacking('gradients')}")
    backward = _autograd(impl.fn) if caps.tensors == "torch" else impl.fn.attention_backward
    grads = call_in_process(lambda *arrays, **kw: backward(*arrays, d_out, **kw), (q, k, v), kwargs)
    if not isinstance(grads, tuple | list) or len(grads) != 3:
        raise CallFailed(f"the backward returned {type(grads).__name__}, not (dq, dk, dv)", "output")
    return tuple(checked_array(g, shape=x.shape, dtype=x.dtype, what=name)
                 for g, x, name in zip(grads, (q, k, v), ("dq", "dk", "dv"), strict=True))
