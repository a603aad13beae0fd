"""The protocol's check of what an adapter builds itself: a peer without a `bias` (or a window, a cap, ALiBi) gets
it from the adapter as a score_mod or an additive mask, so a bad value must be refused by the adapter, naming the
keyword (specs.score_mods), before the peer sees what the adapter made of it. What a peer takes as its own
argument is never checked here: how the peer treats it is what the run reports."""

from __future__ import annotations

import numpy as np

from specs.dtypes import is_float
from specs.score_mods import ScoreMods, check_score_mods
from specs.validation import AttentionInputError, AttentionShape


def _numpy(x: object) -> object:
    """A torch tensor as NumPy (floating point as float64), anything else as it is; torch is not imported."""
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        return (x.double() if x.is_floating_point() else x).numpy()
    return x


def checked_adapter_mods(q, k, v, **mods) -> ScoreMods:
    """`mods` (those the adapter builds) checked against q, k, v's shapes, in the protocol's layout."""
    shape = AttentionShape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    return check_score_mods(shape, **{name: _numpy(value) for name, value in mods.items()})



def bias_in_domain(bias: object) -> object:
    """`bias` unchanged where the protocol takes it: None, or floating point with no NaN and no +inf. A peer with a
    bias of its own promotes an integer one and propagates a NaN, as its documentation allows; the protocol refuses
    both (SDPA reads an integer mask as boolean; a NaN or +inf bias is no score), so the adapter applies that rule
    itself rather than report a peer for the protocol's convention. The bias's shape reaches the peer as it is."""
    if bias is None:
        return None
    values = np.asarray(bias)
    if not is_float(values.dtype):
        raise AttentionInputError(f"bias must be floating point, got dtype {values.dtype}")
    if np.isnan(values).any() or (values == np.inf).any():
        raise AttentionInputError("bias holds NaN or +inf: a bias is finite, or -inf to hide a key")
    return bias
