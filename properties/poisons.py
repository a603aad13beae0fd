"""The non-finite values the poisoning properties hide behind masks, windows and causal horizons:
a masked key must not reach a row, whatever it holds."""

from __future__ import annotations

import numpy as np

POISONS = (np.nan, np.inf, -np.inf)
