"""The meta-test's twin (--perturb-declared): every implementation that declares deviations, made wrong in one place
wherever a declared deviation explains something, so that a run shows whether its declarations hide the error.

In a call where a declared deviation fires (it explains elements the implementation returns off the oracle), one
element moves: the first element no deviation explains, by twice its allowance (so the failure reads as the declared
one's would); where the deviations explain every element, the first one they predict a value of, by twice that
allowance; a predicted non-finite element is made finite and off the oracle; a call whose every output is undefined
raises an error no deviation names; an accepted bad input whose reading's output is undefined comes back one column
wider. A raised error a deviation explains becomes another error; a report it explains, another report. Each must
then be an unexpected failure (tools/perturbed_cells.py reads the verdicts against a run without the twin). Nothing
changes outside deviation-declaring cells or in calls where no deviation fires.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.api.explain import (
    accepted_reading,
    backward_prediction,
    deviation_call,
    forward_prediction,
    poisoned_prediction,
)
from harness.engine import run_context
from harness.engine.declarations import RUNNING
from harness.engine.guarded_call import CallFailed, as_numpy
from specs.deviations import Call

PERTURBED = "PerturbedError"  # the error no deviation names


def _deviations() -> tuple:
    """The deviations declared for the running property's claims on its subject, when the twin is on."""
    running = RUNNING.get()
    if running is None or not run_context.current().perturb:
        return ()
    return tuple({row.deviation.describe(): row.deviation for row in running.rows_for(running.claims)}.values())


def _moved(outputs) -> tuple[int, tuple, object] | None:
    """(which output, which element, its new value) of the first output where a deviation fires, or None."""
    for number, judged in enumerate(outputs):
        explained = np.zeros(judged.got.shape, dtype=bool)
        for mask in judged.explained.values():
            explained |= mask
        with np.errstate(invalid="ignore"):
            same = (judged.got == judged.reference) | (np.isnan(judged.got) & np.isnan(judged.reference))
            fires = explained & ~same
        if not fires.any():
            continue
        valued = np.isfinite(judged.expected) & ~judged.free & ~judged.non_finite
        for candidates in (valued & ~explained, valued & explained):
            if candidates.any():
                at = tuple(int(i) for i in np.argwhere(candidates)[0])
                return number, at, judged.got[at] + 2 * judged.allowed[at] + 1e-300
        predicted = judged.non_finite & np.isfinite(judged.reference)
        if predicted.any():
            at = tuple(int(i) for i in np.argwhere(predicted)[0])
            return number, at, judged.reference[at] + 2 * judged.allowed[at] + 1e-300  # finite, and not the oracle's
        return number, None, None
    return None


def _apply(raw_parts: list, number: int, at: tuple | None, value: object) -> list:
    if at is None:
        raise CallFailed(f"the implementation raised {PERTURBED}: the twin's output is all undefined", "raised")
    array = np.array(as_numpy(raw_parts[number]), copy=True)
    array[at] = value
    raw_parts[number] = array
    return raw_parts


def perturbed_output(trial, problem, extra: Mapping, raw: object) -> object:
    """The call's output as the twin returns it (module docstring); `raw` itself when the twin is off."""
    deviations = _deviations()
    if not deviations or any(key in extra for key in ("dropout_p", "dropout_seed")):
        return raw
    with_lse = bool(extra.get("return_lse")) and isinstance(raw, tuple) and len(raw) == 2
    parts = list(raw) if with_lse else [raw]
    arrays = [as_numpy(part) for part in parts]
    if any(array is None for array in arrays):
        return raw
    out = arrays[0].astype(np.float64)
    lse = arrays[1].astype(np.float64) if with_lse else None
    call = deviation_call(trial, problem, extra)
    try:
        if call.poisoned:
            outputs = poisoned_prediction(trial, problem, extra, call, out, deviations)
        else:
            outputs = forward_prediction(trial, call, trial.oracle_kwargs(problem), out, lse, deviations)
    except (ValueError, IndexError):  # shapes the oracle does not take: an input the protocol refuses
        outputs = None
    if outputs is None:
        return _accepted_perturbed(trial, problem, raw, deviations)
    moved = _moved(outputs)
    if moved is None:
        return raw
    changed = _apply(parts, *moved)
    return tuple(changed) if with_lse else changed[0]


def _accepted_perturbed(trial, problem, raw: object, deviations) -> object:
    """A bad input a declared deviation says the implementation reads some way: one element of that reading's
    output moved by twice the allowance it is judged by; where the reading's output is undefined, an output of
    another shape (one column more)."""
    found = accepted_reading(trial, problem, raw, "", deviations)
    if found is None:
        return raw
    allowed = found[4]
    moved = np.array(as_numpy(raw), copy=True)
    if allowed is None:
        return np.concatenate([moved, np.zeros(moved.shape[:-1] + (1,), moved.dtype)], axis=-1)
    moved.flat[0] = moved.flat[0] + 2 * allowed.flat[0] + 1e-300
    return moved


def perturbed_gradients(trial, problem, d_out: np.ndarray, extra: Mapping, wrt: tuple[str, ...],
                        grads: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The gradients as the twin returns them."""
    deviations = _deviations()
    if not deviations or any(key in extra for key in ("dropout_p", "dropout_seed")):
        return grads
    from harness.api.explain import _garbage  # the clean call the poisoned gradients are judged against

    call = deviation_call(trial, problem, extra, d_out=d_out)
    source = deviation_call(trial, _garbage(problem), extra, d_out=d_out) if call.poisoned else call
    outputs = backward_prediction(trial, call, source, trial.oracle_kwargs(problem), wrt, grads, deviations)
    moved = None if outputs is None else _moved(outputs)
    if moved is None:
        return grads
    return tuple(_apply(list(grads), *moved))


def perturbed_failure(trial, problem, failure: CallFailed, extra: Mapping | None = None,
                      d_out: np.ndarray | None = None) -> CallFailed:
    """A raised error a declared deviation explains (of a call made with `extra`; a backward's, with the cotangent
    `d_out`), as another error."""
    deviations = _deviations()
    if not deviations or failure.kind != "raised":
        return failure
    call = deviation_call(trial, problem, extra, d_out=d_out)
    error = failure.summary.removeprefix("the implementation raised ")
    if any(deviation.explains_raise(call, error) for deviation in deviations):
        return CallFailed(f"the implementation raised {PERTURBED}: in place of {error.splitlines()[0][:80]}",
                          "raised")
    return failure


def perturbed_report(summary: str, observed: Mapping) -> tuple[str, Mapping]:
    """A property's own finding a declared deviation explains, as another finding."""
    deviations = _deviations()
    if not deviations or not observed or not any(d.explains_report(summary, observed) for d in deviations):
        return summary, observed
    head, _, _ = summary.partition(": ")
    changed = dict(observed)
    if "resident_growth" in changed:
        changed["resident_growth"] = 100 * changed["resident_growth"]
    return f"{head}: a report of the twin's own", changed


def perturbed_sequence(trial, exact: tuple[np.ndarray, ...], keywords: Mapping, out: np.ndarray,
                       lse: object) -> tuple[np.ndarray, object]:
    """One packed sequence's output and log-sum-exp as the twin returns them (judged as a dense call, as
    harness.api.explain.judge_sequence does)."""
    deviations = _deviations()
    if not deviations or not exact[1].shape[2]:
        return out, lse
    keywords = dict(keywords)
    alignment = keywords.pop("causal_alignment", trial.variant.capabilities.causal_alignment)
    call = Call(*exact, keywords, trial.variant.dtype, alignment)
    lse_array = None if lse is None else as_numpy(lse).astype(np.float64)
    outputs = forward_prediction(trial, call, {**keywords, "causal_alignment": alignment},
                                 np.asarray(out, dtype=np.float64), lse_array, deviations)
    moved = None if outputs is None else _moved(outputs)
    if moved is None:
        return out, lse
    parts = _apply([np.asarray(out), lse_array], *moved)
    return parts[0], (lse if lse is None or moved[0] == 0 else parts[1])


def perturbed_pack(arrays: tuple, raw: object) -> object:
    """A varlen pack whose unused positions hold a poison a declared deviation says reaches every row: one element
    of the packed output made finite."""
    deviations = [d for d in _deviations() if getattr(d, "reached_in_pack", None)]
    packed = [as_numpy(x) for x in arrays[:3]]
    if not deviations or any(x is None for x in packed) or all(np.all(np.isfinite(x)) for x in packed):
        return raw
    out = as_numpy(raw[0] if isinstance(raw, tuple) else raw)
    predicted = deviations[0].reached_in_pack(*(x.astype(np.float64) for x in packed))
    if predicted is None or out is None or not (predicted & ~np.isfinite(out)).any():
        return raw
    moved = np.array(out, copy=True)
    moved[tuple(int(i) for i in np.argwhere(predicted & ~np.isfinite(out))[0])] = 0.0
    return (moved, raw[1]) if isinstance(raw, tuple) else moved
