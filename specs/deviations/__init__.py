"""Documented deviations (CONTRACT 2): the known behaviours an implementation may declare, each with a prediction.

A declaration names a claim, the dtypes and one deviation of this catalogue (with its parameters), or, for an
outside implementation, a function of its own (`OwnDeviation`). The harness applies the cell's deviations inside
the property on every failing example: the elements a deviation explains must be what it predicts, every other
element is judged against the oracle as before, and only a fully explained example is a declared failure
(harness.engine.explanation). docs/checking-your-implementation.md lists them; `python -m tools.docs_pages`
writes docs/generated/deviations.md from this catalogue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from specs.deviations.base import OUTPUTS, Call, Deviation, DeviationError, PatternDeviation
from specs.deviations.deviant_model import DeviantModel
from specs.deviations.errors import ERROR_DEVIATIONS
from specs.deviations.ignored import IGNORED_DEVIATIONS
from specs.deviations.kernels import KERNEL_DEVIATIONS, MERGE_DEVIATIONS
from specs.deviations.lse import LSE_DEVIATIONS
from specs.deviations.poison import POISON_DEVIATIONS
from specs.deviations.precision import PRECISION_DEVIATIONS
from specs.deviations.ring_backward import RING_BACKWARD_DEVIATIONS
from specs.deviations.rows import ROW_DEVIATIONS
from specs.fill import finite_garbage

# narrowest first: accept mode (harness.pytest_plugin.accept) tries them in this order
CATALOGUE: dict[str, type[Deviation]] = {cls.name: cls for cls in (
    *ROW_DEVIATIONS, *IGNORED_DEVIATIONS, *POISON_DEVIATIONS, *LSE_DEVIATIONS, *ERROR_DEVIATIONS, *KERNEL_DEVIATIONS,
    *RING_BACKWARD_DEVIATIONS, *PRECISION_DEVIATIONS, *MERGE_DEVIATIONS)}


class OwnDeviation(Deviation):
    """An outside implementation's own deviation: `predict(call)` -> {output name: (mask, values)} for the forward
    outputs "out" and "lse", a function of the call alone (a specs.deviations.Call: the inputs and keywords, never
    the output)."""

    name = "own"
    summary = "the implementation's own prediction"

    def __init__(self, predict: Callable[[Call], Mapping]) -> None:
        super().__init__()
        self.predict = predict
        self.label = f"own:{getattr(predict, '__qualname__', repr(predict))}"

    def describe(self) -> str:
        return self.label

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        found = self.predict(call)
        if not isinstance(found, Mapping):
            raise DeviationError(f"{self.label} returned a {type(found).__name__}, not a dict {{output: (mask, "
                                 "values)}}")
        predicted = {}
        for output, pair in found.items():
            if output not in ("out", "lse"):
                raise DeviationError(f"{self.label} predicts {output!r}; an own deviation predicts 'out' and 'lse'")
            try:
                mask, values = pair
            except (TypeError, ValueError):
                raise DeviationError(f"{self.label}: {output!r} maps to (mask, values), got {pair!r}") from None
            shape = call.oracle.out.shape if output == "out" else call.oracle.lse.shape
            mask = np.asarray(mask)
            if mask.dtype != bool or mask.shape != shape:
                raise DeviationError(f"{self.label}: the mask of {output!r} is a boolean array of shape {shape}, got "
                                     f"{mask.dtype} {mask.shape}")
            predicted[output] = (mask, np.broadcast_to(np.asarray(values, dtype=np.float64), shape))
        return predicted


def deviation_from_fields(name: object, params: Mapping, where: str) -> Deviation:
    """The catalogue's deviation `name` with its parameters, or a DeviationError naming `where` and the catalogue."""
    if callable(name):
        if params:
            raise DeviationError(f"{where}: an own deviation (a function) takes no parameters, got {sorted(params)}")
        return OwnDeviation(name)
    if name not in CATALOGUE:
        raise DeviationError(f"{where}: no deviation named {name!r}; the catalogue: {', '.join(CATALOGUE)} (or a "
                             "function of the call returning {output: (mask, values)})")
    try:
        return CATALOGUE[name](**params)
    except DeviationError as exc:
        raise DeviationError(f"{where}: {exc}") from None


__all__ = ["CATALOGUE", "OUTPUTS", "Call", "DeviantModel", "Deviation", "DeviationError", "OwnDeviation",
           "PatternDeviation", "deviation_from_fields", "finite_garbage"]
