"""The score modifications beyond the seeds for the torch records: checked against the protocol on NumPy views of
the tensors (specs.score_mods.check_score_mods, one rule for every record), so a bad value is an error naming
its keyword before any kernel sees it."""

from __future__ import annotations

import torch

from specs.score_mods import ScoreMods, check_score_mods
from specs.validation import AttentionShape


def _numpy_view(x: object) -> object:
    """A tensor as a NumPy array for the check (floating point as float64: NumPy has no bfloat16); else as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    x = x.detach().cpu()
    return (x.to(torch.float64) if x.is_floating_point() else x).numpy()


def checked_mods(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **mods) -> ScoreMods:
    """The modifications (bias, window_size, softcap, alibi_slopes, sinks) checked for q, k, v's shapes; the
    window and the cap as the protocol reads them (a window of two unbounded sides is none, a cap <= 0 is none)."""
    shape = AttentionShape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    return check_score_mods(shape, **{name: _numpy_view(value) for name, value in mods.items()})
