"""What fills the positions of an input no row may read: NaN, to check a poison never reaches an output (its own
claims), or finite garbage, values of ordinary size an implementation that reads them cannot help but show (every
other claim, and a poisoned call judged again without its poison: specs.deviations)."""

from __future__ import annotations

import numpy as np

GARBAGE_SEED = 20260  # the garbage is the same on every run


def finite_garbage(x: np.ndarray) -> np.ndarray:
    """`x` with every NaN and Inf replaced by a finite value in [-3, 3] from a fixed stream."""
    bad = ~np.isfinite(x)
    if not bad.any():
        return x
    stream = np.random.default_rng(GARBAGE_SEED).uniform(-3.0, 3.0, size=x.shape).astype(x.dtype)
    return np.where(bad, stream, x)
