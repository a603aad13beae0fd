"""NumPy <-> torch at the protocol boundary (Capabilities.tensors = "torch").

NumPy has no bfloat16 of its own: ml_dtypes' bfloat16 and torch.bfloat16 share their 16 bits, so an array
crosses as a uint16 view of those bits and is viewed as the other side's bfloat16.
"""

from __future__ import annotations

import numpy as np
import torch

from specs.dtypes import is_extension, numpy_dtype


def as_tensor(a: np.ndarray | torch.Tensor | None) -> torch.Tensor | None:
    """A tensor sharing the array's memory and strides (bfloat16 as torch.bfloat16); torch cannot hold negative
    strides, so such an array is copied. Tensors and None pass through."""
    if a is None or isinstance(a, torch.Tensor):
        return a
    if any(stride < 0 for stride in a.strides):
        a = np.ascontiguousarray(a)
    if is_extension(a.dtype) and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as NumPy (detached, on the CPU); torch.bfloat16 as ml_dtypes' bfloat16."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.uint16).numpy().view(numpy_dtype("bfloat16"))
    return tensor.numpy()
