"""Where a non-finite value goes once it is in a call: from rows of the output to the gradients those rows feed."""

from __future__ import annotations

import numpy as np

from specs.deviations.base import Call
from specs.gradients import reduce_to_shape


def rows_to_gradients(call: Call, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The gradient elements a non-finite output row reaches (rows: (batch, heads, n_q)): dQ of the row, dK and dV of
    its kv head (every key: dS^T Q and P^T dO sum over the rows), the bias entries the row's scores use and the sink
    of its head."""
    if not rows.any():
        return {}
    b, heads, n_q, _ = call.q.shape
    heads_kv = call.k.shape[1]
    reached = {"dq": np.broadcast_to(rows[..., None], call.q.shape).copy()}
    per_kv_head = rows.reshape(b, heads_kv, call.group, n_q).any(axis=(2, 3))
    for name, array in (("dk", call.k), ("dv", call.v)):
        reached[name] = np.broadcast_to(per_kv_head[:, :, None, None], array.shape).copy()
    bias = call.keywords.get("bias")
    if bias is not None:
        scores = np.broadcast_to(rows[..., None], (b, heads, n_q, call.k.shape[2])).astype(np.float64)
        reached["dbias"] = reduce_to_shape(scores, np.shape(bias)) > 0
    if call.keywords.get("sinks") is not None:
        reached["dsinks"] = rows.any(axis=(0, 2))
    return reached
