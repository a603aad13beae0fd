"""NumPy <-> torch at the protocol boundary, for the torch-backed records.

NumPy has no bfloat16 of its own: ml_dtypes' bfloat16 and torch.bfloat16 share their 16 bits, so an array
crosses as a uint16 view of those bits and is viewed as the other side's bfloat16.
"""

from __future__ import annotations

import numpy as np
import torch

from specs.dtypes import is_extension, numpy_dtype


def to_torch(*arrays: np.ndarray | None) -> list[torch.Tensor | None]:
    """Tensors sharing the arrays' memory (copied first where not contiguous); bfloat16 as torch.bfloat16."""
    return [None if a is None else _tensor(np.ascontiguousarray(a)) for a in arrays]


def _tensor(a: np.ndarray) -> torch.Tensor:
    if is_extension(a.dtype) and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as NumPy (detached, on the CPU); torch.bfloat16 as ml_dtypes' bfloat16."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.uint16).numpy().view(numpy_dtype("bfloat16"))
    return tensor.numpy()
