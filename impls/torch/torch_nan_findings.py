"""What torch 2.13's CPU attention does with NaN and Inf, measured by properties/test_poisoning.py.

Scoped declarations (protocol.known_defects) shared by the torch records (the gradients' by
properties/test_gradient_poisoning.py): MATH adds the mask as -inf to the scores
(NaN + -inf = NaN) and multiplies hidden values by zero weights (0 * NaN = NaN); the CPU flash kernel, which
torch.nn.MultiheadAttention's fast path also takes, treats a row whose scores are NaN as fully masked and
returns 0 for it instead of NaN.
"""

from __future__ import annotations

HIDDEN_NAN_LEAKS = {
    "why": "torch 2.13 CPU: masking adds -inf to a NaN score (NaN) and multiplies hidden NaN values by zero "
           "weights, so NaN in a causal-future, masked or padded key reaches rows that cannot see it",
    "properties": ("test_non_finite_causal_future_never_reaches_past_rows",
                   "test_non_finite_masked_keys_never_reach_rows_that_cannot_see_them",
                   "test_visible_nan_reaches_exactly_the_rows_that_see_it"),
    "match": r"out rows that (see none of the keys \[[\d, ]+\] holding (nan|inf|-inf)|cannot see the NaN in)",
}

VISIBLE_NAN_DROPPED = {
    "why": "torch 2.13's CPU flash kernel turns a row whose scores are NaN into a zero row (as if fully "
           "masked): a NaN key the row sees gives 0, not NaN",
    "properties": ("test_visible_nan_reaches_exactly_the_rows_that_see_it",),
    "match": r"a NaN in key \d+ did not reach a row that sees it",
}


IDENTITY_PROJECTION_SPREADS_NAN = {
    "why": "the adapter's identity projections (x @ I) multiply a NaN by the zeros of I, so a NaN in one value "
           "element reaches every column of the merged heads before the module's attention sees it",
    "properties": ("test_visible_nan_reaches_exactly_the_rows_that_see_it",),
    "match": r"out elements a NaN in value element v\[:, :, \d+, \d+\] cannot reach",
}


GRADIENT_PROPERTIES = ("test_non_finite_keys_no_row_sees_never_reach_gradients",
                       "test_non_finite_keys_past_every_causal_horizon_never_reach_gradients")
HIDDEN_NAN_REACHES_GRADIENTS = {
    "why": "torch 2.13 CPU: the forward already carries a NaN key no row sees into every row (masking adds -inf to "
           "its NaN score), and the backward multiplies hidden keys by dS = 0 in dQ = dS K (0 * NaN = NaN)",
    "properties": GRADIENT_PROPERTIES,
    "match": r"d[QKV] holds (nan|inf|-inf) at \[[\d, ]+\] .* positions that no query sees hold",
}


def nan_findings(dtypes: tuple[str, ...], *, drops_visible_nan: bool, projects: bool = False) -> dict:
    """The declarations for a torch record running in `dtypes`; `projects`: the record goes through
    torch.nn.MultiheadAttention's identity projections. One property sees both visible-NaN findings, and
    whichever it meets first ends the example, so together they are one scope (either message)."""
    found: dict = {"hidden-non-finite-never-reaches-output": {**HIDDEN_NAN_LEAKS, "dtypes": dtypes},
                   "hidden-non-finite-never-reaches-gradients": {**HIDDEN_NAN_REACHES_GRADIENTS, "dtypes": dtypes}}
    visible = [VISIBLE_NAN_DROPPED] * drops_visible_nan + [IDENTITY_PROJECTION_SPREADS_NAN] * projects
    if visible:
        found["visible-nan-propagates"] = {
            "why": "; and ".join(scope["why"] for scope in visible), "dtypes": dtypes,
            "properties": VISIBLE_NAN_DROPPED["properties"],
            "match": "|".join(f"({scope['match']})" for scope in visible)}
    return found
