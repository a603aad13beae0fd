"""The non-finite values the poisoning properties hide behind masks, windows and causal horizons (a masked key must
not reach a row, whatever it holds), and the check of a visible NaN (seed 003 § 掩码: it reaches exactly the rows
that see it)."""

from __future__ import annotations

import numpy as np

from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from protocol.registry import Variant
from specs.derivations import entries_set
from specs.problems import Problem

POISONS = (np.nan, np.inf, -np.inf)


@reproducible
def check_visible_nan(variant: Variant, problem: Problem, j: int, column: int | None) -> None:
    """NaN in key j (column None: all of its rows' elements turn NaN) or in the value element v_j,column (that
    column of its rows turns NaN); every other element is the implementation's own output on the clean problem."""
    trial = Trial(variant, problem)
    oracle, _ = trial.oracle()
    clean, allowance = trial.own_output()
    allowed = np.broadcast_to(True if oracle.allowed is None else oracle.allowed,
                              problem.q.shape[:3] + (problem.n_k,))
    sees = allowed[..., j]  # (batch, heads, n_q)
    if column is None:
        poisoned = problem.derive(entries_set, "k", (None, None, j), float("nan"))
        nan_expected = np.broadcast_to(sees[..., None], clean.shape)
        where = f"key {j}"
    else:
        poisoned = problem.derive(entries_set, "v", (None, None, j, column), float("nan"))
        nan_expected = np.zeros(clean.shape, dtype=bool)
        nan_expected[..., column] = sees
        where = f"value element v[:, :, {j}, {column}]"
    out = trial.check_output(trial.call_raw(poisoned), poisoned, finite=False)
    missing = nan_expected & ~np.isnan(out)
    if missing.any():
        at = tuple(int(i) for i in np.argwhere(missing)[0])
        trial.fail(f"a NaN in {where} did not reach a row that sees it", poisoned, claim="visible-nan-propagates",
                   details=(f"out{list(at)} = {out[at]!r}; {int(missing.sum())} of {int(nan_expected.sum())} "
                            "elements that must be NaN are not",))
    hidden_rows = np.broadcast_to(~sees[..., None], out.shape)
    for part, claim, what in ((hidden_rows, "hidden-non-finite-never-reaches-output",
                               f"out rows that cannot see the NaN in {where}"),
                              (~hidden_rows & ~nan_expected, "visible-nan-propagates",
                               f"out elements a NaN in {where} cannot reach")):
        trial.expect_close(np.where(part, out, clean), clean, allowance, what=what,
                           versus="its output without the NaN", problem=poisoned, claim=claim)
