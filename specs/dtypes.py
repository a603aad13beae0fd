"""The floating-point dtypes the suite computes in, by name: NumPy's own and bfloat16 (from ml_dtypes).

NumPy knows float64, float32 and float16. bfloat16 is ml_dtypes' type: importing ml_dtypes registers it with
NumPy (before that, np.dtype("bfloat16") raises), NumPy does not count it as np.floating, and np.finfo does
not know it (ml_dtypes.finfo does). ml_dtypes is imported here on first use only, so an environment without
it runs every other dtype, and a bfloat16 variant is skipped with `missing`'s reason.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

EXTENSION_DTYPES = {"bfloat16": "ml_dtypes"}  # dtype name -> the package that provides it


class DtypeUnavailable(ImportError):
    """The package that provides a dtype is not installed."""


def missing(dtype: object) -> str | None:
    """Why `dtype` cannot be used here (its package is not installed), or None."""
    package = EXTENSION_DTYPES.get(str(dtype))
    if package is None:
        return None
    try:
        importlib.import_module(package)
    except ImportError:
        return f"{dtype} needs the {package} package, which is not installed (pip install {package})"
    return None


def numpy_dtype(dtype: object) -> np.dtype:
    """np.dtype(dtype), importing the package of an extension dtype first (DtypeUnavailable without it)."""
    reason = missing(dtype)
    if reason:
        raise DtypeUnavailable(reason)
    return np.dtype(dtype)


def is_extension(dtype: object) -> bool:
    """Whether `dtype` is one of EXTENSION_DTYPES (not a NumPy builtin)."""
    return str(dtype) in EXTENSION_DTYPES


def is_float(dtype: object) -> bool:
    """A floating-point dtype: NumPy's np.floating, or an extension float such as bfloat16."""
    return is_extension(dtype) or np.issubdtype(np.dtype(dtype), np.floating)


def finfo(dtype: object) -> Any:
    """Machine limits (eps, tiny, max, smallest_subnormal) of a float dtype: ml_dtypes.finfo for bfloat16."""
    resolved = numpy_dtype(dtype)
    if is_extension(resolved):
        return importlib.import_module(EXTENSION_DTYPES[resolved.name]).finfo(resolved)
    return np.finfo(resolved)


def accumulator(dtype: object) -> np.dtype:
    """What a sum over `dtype` accumulates in: float32 for storage narrower than float32, else `dtype`.

    NumPy sums float16 pairwise in float32 and rounds once, as PyTorch's reductions do for float16 and
    bfloat16; NumPy reduces ml_dtypes' bfloat16 one element at a time in bfloat16 (10^4 x 0.1 sums to 32),
    so callers that want the former pass this as the reduction's dtype.
    """
    resolved = numpy_dtype(dtype)
    return np.dtype(np.float32) if resolved.itemsize < 4 else resolved
