"""Memory layouts of the same (batch, heads, seq, dim) values, as callers really pass them.

docs/design.md § Numerical judgement: the regimes real kernels switch on include
strided inputs. Every layout here holds exactly the values of its contiguous
argument (only the strides differ), so an implementation must return the same
attention for each; one that reads memory as if it were contiguous does not.
"""

from __future__ import annotations

import numpy as np

from specs.validation import AttentionInputError


def _bshd(x: np.ndarray) -> np.ndarray:
    """FlashAttention's [batch, seq, heads, dim] storage, transposed to a [batch, heads, seq, dim] view."""
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)


def _sliced_head_dim(x: np.ndarray) -> np.ndarray:
    """The head dim sliced out of a wider buffer (a fused QKV projection): rows are not adjacent."""
    wide = np.full(x.shape[:-1] + (x.shape[-1] + 5,), np.nan, dtype=x.dtype)
    wide[..., 3:3 + x.shape[-1]] = x
    return wide[..., 3:3 + x.shape[-1]]


def _every_other_element(x: np.ndarray) -> np.ndarray:
    """A step-2 view of the head dim: the innermost stride is not the element size."""
    wide = np.full(x.shape[:-1] + (2 * x.shape[-1],), np.nan, dtype=x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


def _reversed_sequence(x: np.ndarray) -> np.ndarray:
    """Negative strides on the sequence axis (a view of a buffer stored back to front)."""
    return np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1]


LAYOUTS = {
    "contiguous": lambda x: x,
    "bshd": _bshd,
    "fortran": np.asfortranarray,
    "sliced_head_dim": _sliced_head_dim,
    "every_other_element": _every_other_element,
    "reversed_sequence": _reversed_sequence,
}


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """`x`'s values in the memory layout named `layout` (one of LAYOUTS)."""
    if layout not in LAYOUTS:
        raise AttentionInputError(f"unknown layout {layout!r}; one of {sorted(LAYOUTS)}")
    return LAYOUTS[layout](x)
