"""Fully masked rows (seed 003 § 掩码; docs/design.md, The oracle): a query row that sees no key has output exactly 0
and log-sum-exp -inf, the check the masking properties run on rows emptied in any way."""

from __future__ import annotations

import numpy as np

from harness.api import as_numpy
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from specs.reference import attention


def _worst(values: np.ndarray, bad: np.ndarray) -> tuple[int, ...]:
    """The index of the worst of `values` where `bad`: a NaN first, else the largest magnitude."""
    score = np.where(bad, np.nan_to_num(np.abs(values), nan=np.inf, posinf=np.finfo(np.float64).max), -1.0)
    return tuple(int(i) for i in np.unravel_index(np.argmax(score), values.shape))


@reproducible
def check_empty_rows_zero(trial: Trial, how: str) -> None:
    """fully-masked-rows-zero (docs/design.md, The oracle): every query row that the oracle lets see no key has output
    exactly 0 and, where the implementation returns its LSE (capability lse), LSE -inf; in the plain call and
    in the return_lse=True call. `how` says how the rows were emptied."""
    problem = trial.problem
    allowed = attention(*trial.exact_inputs(problem), **trial.oracle_kwargs(problem), finite=False).allowed
    empty = ~allowed.any(axis=-1)  # (batch, heads, n_q)
    rows = f"{int(empty.sum())} of {empty.size} query rows see no key ({how})"
    calls = [(trial.call_raw(problem), None)]
    if trial.variant.capabilities.lse:
        raw = trial.call_raw(problem, return_lse=True)
        if not isinstance(raw, tuple) or len(raw) != 2:
            trial.fail("declared lse=True but return_lse=True did not return (out, lse)", problem)
        lse = as_numpy(raw[1])
        if lse is None or lse.shape != empty.shape:
            trial.fail(f"lse has shape {getattr(lse, 'shape', type(raw[1]).__name__)}, not (batch, heads, n_q) = "
                       f"{empty.shape}", problem)
        calls.append((raw[0], lse.astype(np.float64)))
    for raw_out, lse in calls:
        out = trial.check_output(raw_out, problem, finite=False)
        wrong = empty[..., None] & (out != 0)
        if wrong.any():
            where = _worst(out, wrong)
            trial.fail("a query row with no visible key has a non-zero output", problem, details=(
                f"out{list(where)} = {out[where]!r}; a fully masked row gives exactly 0", rows,
                f"{int(wrong.any(axis=-1).sum())} of them are not 0"))
        wrong = empty & (lse != -np.inf) if lse is not None else None
        if wrong is not None and wrong.any():
            where = _worst(lse, wrong)
            trial.fail("a query row with no visible key has a log-sum-exp other than -inf", problem, details=(
                f"lse{list(where)} = {lse[where]!r}; the log of an empty sum is -inf", rows,
                f"{int(wrong.sum())} of them are not -inf"))
