"""NumPy <-> torch at the protocol boundary, for the torch-backed records."""

from __future__ import annotations

import numpy as np
import torch


def to_torch(*arrays: np.ndarray | None) -> list[torch.Tensor | None]:
    return [None if a is None else torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]

