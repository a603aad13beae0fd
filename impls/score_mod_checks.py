"""The score modifications beyond the seeds, checked for every record that takes tensors: against the protocol on
NumPy views of them (specs.score_mods.check_score_mods, one rule for every record), so a bad value is an error
naming its keyword before any kernel, or any peer, sees it. Nothing here imports torch: a tensor is recognised by
its type's module, so the peers' records load where torch is not installed."""

from __future__ import annotations

from specs.score_mods import ScoreMods, check_score_mods
from specs.validation import AttentionShape


def _numpy_view(x: object) -> object:
    """A torch tensor as a NumPy array (floating point as float64: NumPy has no bfloat16); anything else as it is."""
    if not type(x).__module__.startswith("torch"):
        return x
    x = x.detach().cpu()
    return (x.double() if x.is_floating_point() else x).numpy()


def checked_mods(q, k, v, **mods) -> ScoreMods:
    """The modifications (bias, window_size, softcap, alibi_slopes, sinks) checked for q, k, v's shapes in the
    protocol's (batch, heads, n, d) layout; the window and the cap as the protocol reads them (a window of two
    unbounded sides is none, a cap <= 0 is none)."""
    shape = AttentionShape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    return check_score_mods(shape, **{name: _numpy_view(value) for name, value in mods.items()})
