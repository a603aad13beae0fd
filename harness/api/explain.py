"""How a call is judged in deviation mode (harness.engine.explanation): against the cell's documented deviations,
element by element, with the one tolerance model (specs.tolerance, applied to the deviations' model).

For each call the property makes in the second run of a failing example:
- the elements a deviation explains (each row where its model differs from the oracle, every element for a
  precision, the elements it says a poison reaches, those it predicts directly) must be what it predicts: within
  the tolerance model's allowance for its model (plus its own extra allowance), or non-finite where it says so; or
  else the oracle's (an implementation may conform where the behaviour could have shown);
- every other element is judged against the oracle as before (within the allowance, non-finite only where the
  oracle is);
- a poisoned call whose deviation replaces the poison is also made again with finite garbage in its place, and that
  call is judged as any other;
- the property then sees the oracle's values in place of the explained elements, so what it checks next is checked
  on what a conforming implementation returns.
An element outside this fails the property with a message naming the deviations and what they explained.
A raised error, an accepted bad input or a property's own report (a checker's, a measurement) that a deviation
explains ends the second run as explained (ExplainedStop).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.engine.explanation import DeviationRun, ExplainedStop, active
from harness.engine.guarded_call import as_numpy
from protocol.sharded_adapter import ADAPTER_KEYWORD, group_size
from specs.derivations import inputs_garbled
from specs.deviations import Call, DeviantModel, Deviation, finite_garbage
from specs.deviations.reach import rows_to_gradients
from specs.deviations.ring_steps import LAYOUT, WORLD_SIZE
from specs.gradients import attention_backward, score_mod_gradients
from specs.tolerance import ToleranceUndefined, forward_allowance, gradient_allowance, lse_allowance
from specs.validation import AttentionInputError, check_shapes

NOT_JUDGED = ("dropout_p", "dropout_seed")  # calls whose outputs the oracle does not give without the mask
GRADIENT_NAMES = {"dq": "dQ", "dk": "dK", "dv": "dV", "dbias": "dBias", "dsinks": "dSinks"}


def deviation_call(trial, problem, extra: Mapping | None = None, *, d_out: np.ndarray | None = None) -> Call:
    """The call as its deviations read it: the values the implementation received (float64), its problem's
    keywords as handed, its dtype and causal alignment, the cotangent of a backward, its tile keywords."""
    q, k, v = trial.exact_inputs(problem)
    return Call(q, k, v, problem.handed(trial.variant.dtype).kwargs(), trial.variant.dtype,
                trial.variant.capabilities.causal_alignment, None if d_out is None else d_out.astype(np.float64),
                _model_keywords(trial, (q, k, v), extra or {}))


def _where(mask: np.ndarray, name: str) -> str:
    """'out rows [(0, 1, 2), (0, 1, 3)] (6 elements)': the first rows a mask touches."""
    if mask.ndim < 2:
        picked = [int(i) for i in np.argwhere(mask)[:3, 0]] if mask.ndim else []
        return f"{name} {picked}"
    rows = np.argwhere(mask.any(axis=-1))  # in lexicographic order, each row once
    shown = ", ".join(str(tuple(int(i) for i in row)) for row in rows[:3]) + (", ..." if len(rows) > 3 else "")
    return f"{name} rows [{shown}] ({int(mask.sum())} elements)"


def _judging_dtype(deviations: tuple[Deviation, ...], dtype: str) -> str:
    for deviation in deviations:
        judged = deviation.judging_dtype(dtype)
        if judged != dtype:
            return judged
    return dtype


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))


ROW_OUTPUTS = ("out", "dq", "dk", "dv", "dbias")  # outputs whose last axis runs along one row (or one key)


def _rows_differing(key: str, model: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Where a deviation's model differs from the oracle; for an output of rows, every element of a row it differs
    in anywhere: the model changes a row's weights, so an element that equals the oracle's by coincidence (a mean of
    values that is 0) is still the model's, judged within its allowance."""
    differs = _differs(model, reference)
    if key not in ROW_OUTPUTS:
        return differs
    return np.broadcast_to(differs.any(axis=-1, keepdims=True), differs.shape)


def _bad(got: np.ndarray, expected: np.ndarray, allowed: np.ndarray, non_finite: np.ndarray) -> np.ndarray:
    """Elements outside their prediction: non-finite where `non_finite`; else equal where `expected` is infinite,
    non-finite where it is NaN, within `allowed` of it elsewhere."""
    with np.errstate(invalid="ignore", over="ignore"):
        within = np.abs(got - expected) <= allowed
    finite = np.isfinite(expected)
    ok = np.where(finite, within, np.where(np.isnan(expected), ~np.isfinite(got), got == expected))
    return ~np.where(non_finite, ~np.isfinite(got), ok)


def _fail(trial, problem, what: str, got, expected, allowed, non_finite, bad, run: DeviationRun) -> None:
    __tracebackhide__ = True
    worst = tuple(int(i) for i in np.argwhere(bad)[0])
    place = f"{what}[{', '.join(map(str, worst))}]"
    if non_finite[worst]:
        detail = f"{place}: got {float(got[worst])!r}, which a declared deviation says is non-finite"
    else:
        detail = (f"{place}: got {float(got[worst])!r}, expected {float(expected[worst])!r}, allowed "
                  f"{float(allowed[worst]):.3g}")
    trial.fail(f"{what} differs from what the declared deviations predict beyond the tolerance", problem,
               details=(detail, f"elements outside the prediction: {int(bad.sum())} of {bad.size}"))


class _Judged:
    """One output of one call: its prediction, the elements each deviation explains, the oracle's values."""

    def __init__(self, name: str, got: np.ndarray, reference: np.ndarray, expected: np.ndarray,
                 allowed: np.ndarray, *, key: str | None = None) -> None:
        self.name, self.got, self.reference = name, got, reference
        self.key = key or name  # what the deviations call this output (out, lse, dq, ...)
        self.expected = np.array(expected, dtype=np.float64)
        self.allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), got.shape).copy()
        self.non_finite = np.zeros(got.shape, dtype=bool)
        self.free = np.zeros(got.shape, dtype=bool)  # not judged here: the oracle is itself non-finite (a poison seen)
        self.explained: dict[Deviation, np.ndarray] = {}

    def explain(self, deviation: Deviation, mask: np.ndarray | None) -> None:
        if mask is not None and mask.any():
            mask = np.broadcast_to(mask, self.got.shape)
            self.explained[deviation] = self.explained.get(deviation, np.zeros(self.got.shape, bool)) | mask

    def predict(self, deviation: Deviation, mask: np.ndarray, values: np.ndarray) -> None:
        self.expected = np.where(mask, values, self.expected)
        self.free = self.free & ~mask
        self.explain(deviation, mask)

    def undefined(self, deviation: Deviation, mask: np.ndarray | None) -> None:
        if mask is not None and mask.any():
            self.free = self.free | mask
            self.explain(deviation, mask)

    def must_be_non_finite(self, deviation: Deviation, mask: np.ndarray | None) -> None:
        if mask is not None and mask.any():
            self.non_finite |= mask
            self.explain(deviation, mask)

    def settle(self, trial, problem, run: DeviationRun, dtype: np.dtype) -> np.ndarray:
        """Fail on an element outside the prediction; else the output as the property sees it, and each deviation
        that changed it recorded."""
        __tracebackhide__ = True
        # an element is outside the prediction when it is neither what the deviations predict nor the oracle's (an
        # implementation that conforms where a deviation could have shown, as a kernel choosing its path by size)
        conforms = ~_bad(self.got, self.reference, self.allowed, np.zeros(self.got.shape, bool))
        bad = _bad(self.got, self.expected, self.allowed, self.non_finite) & ~conforms & ~(self.free & ~self.non_finite)
        if bad.any():
            _fail(trial, problem, self.name, self.got, self.expected, self.allowed, self.non_finite, bad, run)
        explained = np.zeros(self.got.shape, dtype=bool)
        for mask in self.explained.values():
            explained |= mask
        seen = np.where(explained, self.reference, self.got)
        changed = _differs(seen, self.got)
        for deviation, mask in self.explained.items():
            if (mask & changed).any():
                run.record(deviation, _where(mask & changed, self.name), int((mask & changed).sum()))
        return seen.astype(dtype) if dtype != np.float64 else seen


def _extra(deviations, call: Call, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The deviations' extra allowances for output `name`, summed (each also explains the elements it widens)."""
    total = np.zeros(shape)
    for deviation in deviations:
        part = deviation.extra_allowance(call).get(name)
        if part is not None:
            total = total + np.broadcast_to(part, shape)
    return total


def _widened(judged, deviations, call: Call, name: str) -> None:
    for deviation in deviations:
        part = deviation.extra_allowance(call).get(name)
        if part is not None:
            judged.explain(deviation, np.broadcast_to(part, judged.got.shape) > 0)



def _model_keywords(trial, inputs: tuple[np.ndarray, ...], extra: Mapping) -> dict:
    """The call's tile keywords, and for a sharded implementation the group size its dense call ran on (what
    protocol.sharded_adapter picks from the shape, or the world_size a property asked for) and its shards' layout."""
    caps = trial.variant.capabilities
    tiles = {key: value for key, value in extra.items() if key in caps.tile_keywords}
    if caps.sharded:
        tiles[WORLD_SIZE] = group_size(check_shapes(*inputs, finite=False), caps, extra.get(ADAPTER_KEYWORD))
        tiles[LAYOUT] = caps.sharding
    return tiles


def judge_output(trial, problem, extra: Mapping, raw: object) -> object:
    """The call's output as the property sees it in deviation mode (module docstring); `raw` as returned, or
    (out, lse) where the call asked for the log-sum-exp. Outside deviation mode, `raw` itself."""
    __tracebackhide__ = True
    run = active()
    if run is None or any(key in extra for key in NOT_JUDGED):
        return raw
    with_lse = bool(extra.get("return_lse")) and isinstance(raw, tuple) and len(raw) == 2
    out, lse = (as_numpy(raw[0]), as_numpy(raw[1])) if with_lse else (as_numpy(raw), None)
    b, h, n_q, _ = problem.q.shape
    if out is None or out.shape != (b, h, n_q, problem.v.shape[-1]) or (with_lse and lse is None):
        return raw  # the property's own checks say what is wrong with it
    deviations = run.deviations
    dtype = trial.dtype
    if out.dtype != dtype:
        allowing = [d for d in deviations if out.dtype.name in d.output_dtypes(trial.variant.dtype)]
        if not allowing:
            return raw
        run.record(allowing[0], f"out returned as {out.dtype.name}")
        out = out.astype(dtype)
    run.calls += 1
    call = deviation_call(trial, problem, extra)
    if call.poisoned:
        judged = _poisoned_forward(trial, problem, extra, call, out, lse, run)
    else:
        judged = _plain_forward(trial, problem, call, trial.oracle_kwargs(problem), out, lse, run)
    if judged is None:
        return (out, lse) if with_lse else out
    return judged if with_lse else judged[0]


def judge_sequence(trial, problem, exact: tuple[np.ndarray, ...], keywords: Mapping, out: np.ndarray,
                   lse: object, pack_keys: int | None = None) -> tuple[np.ndarray, object]:
    """One packed sequence's output (1, heads, n_q, d_v) and log-sum-exp as the property sees them in deviation mode:
    judged as a dense call on the sequence's own q, k, v and `keywords` (specs.varlen.sequence_kwargs). A sequence
    with no key is judged as one whose single key is hidden (value 0: the padding an implementation averages);
    `pack_keys`, the pack's longest sequence of keys, reaches the deviations as the tile keyword of that name."""
    __tracebackhide__ = True
    run = active()
    if run is None:
        return out, lse
    q, k, v = exact
    keywords = dict(keywords)
    if not k.shape[2]:
        k, v = np.zeros(k.shape[:2] + (1, k.shape[3])), np.zeros(v.shape[:2] + (1, v.shape[3]))
        keywords["mask"] = np.zeros((1, 1, 1, 1), dtype=bool)
    alignment = keywords.pop("causal_alignment", trial.variant.capabilities.causal_alignment)
    call = Call(q, k, v, keywords, trial.variant.dtype, alignment, tiles={} if pack_keys is None else {
        "pack_keys": pack_keys})
    lse_array = None if lse is None else as_numpy(lse).astype(np.float64)
    judged = _plain_forward(trial, problem, call, {**keywords, "causal_alignment": alignment},
                            np.asarray(out, dtype=np.float64), lse_array, run)
    return (out, lse) if judged is None else judged


def _plain_forward(trial, problem, call: Call, keywords: Mapping, out, lse, run: DeviationRun):
    __tracebackhide__ = True
    outputs = forward_prediction(trial, call, keywords, out, lse, run.deviations)
    if outputs is None:
        return None
    seen = [judged.settle(trial, problem, run, np.dtype(np.float64) if judged.name == "lse" else trial.dtype)
            for judged in outputs]
    return seen[0], (seen[1] if len(seen) > 1 else lse)


def _explain_each(outputs: list[_Judged], deviations, call: Call, keywords: Mapping, variant_dtype: str,
                  single_results: dict | None, *, gradients: bool = False) -> None:
    """What each deviation explains of each output: everything (a precision), where its own model differs from the
    oracle (`single_results`: deviation -> {output name: its model's values}), the elements it says are non-finite,
    undefined or directly predicted."""
    for judged in outputs:
        _widened(judged, deviations, call, judged.key)
    for deviation in deviations:
        everything = deviation.explains_everything(variant_dtype)
        single = (single_results or {}).get(deviation)
        read = call.read_by(tuple(other for other in deviations if other is not deviation))
        non_finite = deviation.non_finite_gradients(read) if gradients else deviation.non_finite(read)
        undefined = deviation.undefined(read)
        predicted = deviation.predicted_values(read)  # a backward call's predictions are of its gradients
        for judged in outputs:
            if everything:
                judged.explain(deviation, np.ones(judged.got.shape, bool))
            if single is not None and judged.key in single:
                judged.explain(deviation, _rows_differing(judged.key, single[judged.key], judged.reference))
            judged.must_be_non_finite(deviation, non_finite.get(judged.key))
            judged.undefined(deviation, undefined.get(judged.key))
            if judged.key in predicted:
                judged.predict(deviation, *predicted[judged.key])


def forward_prediction(trial, call: Call, keywords: Mapping, out, lse, deviations) -> list[_Judged] | None:
    """The call's out (and lse) with what `deviations` predict of each element and what each explains; None where
    the oracle is undefined for the call (its own checks judge it)."""
    variant_dtype = trial.variant.dtype
    judging = _judging_dtype(deviations, variant_dtype)
    model = DeviantModel(deviations, call.tiles)
    try:
        reference, _ = forward_allowance(call.q, call.k, call.v, dtype=variant_dtype, past_range=trial.past_range,
                                         **keywords)
        result, allowance = forward_allowance(call.q, call.k, call.v, dtype=judging, past_range=trial.past_range,
                                              model=model, **keywords)
    except (ToleranceUndefined, AttentionInputError):
        return None
    outputs = [_Judged("out", out.astype(np.float64), reference.out, result.out,
                       allowance.bound + _extra(deviations, call, "out", out.shape))]
    if lse is not None:
        try:
            bound = lse_allowance(call.q, call.k, call.v, dtype=judging, oracle=result, model=model, **keywords)
        except ToleranceUndefined:
            bound = None
        if bound is not None:
            outputs.append(_Judged("lse", lse.astype(np.float64), reference.lse, result.lse,
                                   bound.bound + _extra(deviations, call, "lse", reference.lse.shape)))
    singles = {}
    for deviation in model.deviations:
        single = DeviantModel((deviation,), call.tiles)(call.q, call.k, call.v, **keywords)
        singles[deviation] = {"out": single.out, "lse": single.lse}
    _explain_each(outputs, deviations, call, keywords, variant_dtype, singles)
    return outputs


def _garbage(problem):
    """The same problem with finite garbage in place of its poison (specs.fill)."""
    return problem.derive(inputs_garbled)


def _poisoned_forward(trial, problem, extra, call: Call, out, lse, run: DeviationRun):
    __tracebackhide__ = True
    if any(d.replaces_poison() for d in run.deviations):
        trial.call(_garbage(problem), **{key: value for key, value in extra.items() if key != "return_lse"})
    outputs = poisoned_prediction(trial, problem, extra, call, out, run.deviations)
    if outputs is None:
        return None
    return outputs[0].settle(trial, problem, run, trial.dtype), lse


def poisoned_prediction(trial, problem, extra, call: Call, out, deviations) -> list[_Judged] | None:
    """A poisoned call's out with what `deviations` predict: the oracle where it is finite, the deviations' models
    where they change a row (both on the same problem with finite garbage in place of the poison, which no row
    that does not see it reads; that call also gives the allowance), not judged where a row sees the poison."""
    clean_call = deviation_call(trial, _garbage(problem), extra)
    keywords = trial.oracle_kwargs(problem)
    model = DeviantModel(deviations, call.tiles)
    try:
        clean, _ = forward_allowance(clean_call.q, clean_call.k, clean_call.v, dtype=trial.variant.dtype,
                                     past_range=trial.past_range, **keywords)
        result, allowance = forward_allowance(clean_call.q, clean_call.k, clean_call.v,
                                              dtype=_judging_dtype(deviations, trial.variant.dtype),
                                              past_range=trial.past_range, model=model, **keywords)
    except (ToleranceUndefined, AttentionInputError):
        return None
    reference = call.oracle
    changed = _rows_differing("out", result.out, clean.out)
    with np.errstate(invalid="ignore"):  # a deviation's own allowance of rows only the poison makes (fmax: not NaN)
        extra = np.fmax(_extra(deviations, clean_call, "out", out.shape), _extra(deviations, call, "out", out.shape))
    judged = _Judged("out", out.astype(np.float64), reference.out, np.where(changed, result.out, reference.out),
                     allowance.bound + extra)
    judged.free = ~np.isfinite(reference.out)  # a row that sees the poison: its own claims judge it
    singles = {deviation: {"out": np.where(np.isfinite(reference.out), DeviantModel((deviation,), call.tiles)(
        clean_call.q, clean_call.k, clean_call.v, **keywords).out, reference.out)} for deviation in model.deviations}
    _explain_each([judged], deviations, call, keywords, trial.variant.dtype, singles)
    return [judged]


def judge_gradients(trial, problem, d_out: np.ndarray, extra: Mapping, wrt: tuple[str, ...],
                    grads: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """dQ, dK, dV (and the modification arrays' gradients in `wrt`) as the property sees them in deviation mode;
    `grads` themselves outside it."""
    __tracebackhide__ = True
    run = active()
    if run is None or any(key in extra for key in NOT_JUDGED):
        return grads
    call = deviation_call(trial, problem, extra, d_out=d_out)
    clean = deviation_call(trial, _garbage(problem), extra, d_out=d_out) if call.poisoned else call
    return _judge_backward(trial, problem, call, clean, trial.oracle_kwargs(problem), wrt, grads, run)


def judge_sequence_gradients(trial, problem, exact: tuple[np.ndarray, ...], d_out: np.ndarray, keywords: Mapping,
                             grads: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """One packed sequence's dQ, dK, dV (dense layout) as the property sees them in deviation mode: judged as a dense
    backward on the sequence's own q, k, v, cotangent and `keywords`."""
    __tracebackhide__ = True
    run = active()
    if run is None:
        return grads
    keywords = dict(keywords)
    alignment = keywords.pop("causal_alignment", trial.variant.capabilities.causal_alignment)
    call = Call(*exact, keywords, trial.variant.dtype, alignment, d_out.astype(np.float64))
    return _judge_backward(trial, problem, call, call, {**keywords, "causal_alignment": alignment}, (), grads, run)


def _judge_backward(trial, problem, call: Call, source: Call, keywords: Mapping, wrt: tuple[str, ...],
                    grads: tuple[np.ndarray, ...], run: DeviationRun) -> tuple[np.ndarray, ...]:
    """dQ, dK, dV (and `wrt`'s) of `call` judged against the deviations; `source`: the call itself, or the same
    with finite garbage in place of its poison (whose gradients are the oracle's where they are finite)."""
    __tracebackhide__ = True
    run.calls += 1
    outputs = backward_prediction(trial, call, source, keywords, wrt, grads, run.deviations)
    if outputs is None:
        return grads
    return tuple(judged.settle(trial, problem, run, grad.dtype) for judged, grad in zip(outputs, grads, strict=True))


def backward_prediction(trial, call: Call, source: Call, keywords: Mapping, wrt: tuple[str, ...],
                        grads: tuple[np.ndarray, ...], deviations) -> list[_Judged] | None:
    """The gradients with what `deviations` predict of each element and what each explains; None where the
    oracle's backward is undefined for the call."""
    names = ("dq", "dk", "dv", *(f"d{name}" for name in wrt))
    model = DeviantModel(deviations, call.tiles)
    try:
        reference = gradient_allowance(source.q, source.k, source.v, source.d_out, dtype=trial.variant.dtype,
                                       **keywords)
        predicted = gradient_allowance(source.q, source.k, source.v, source.d_out,
                                       dtype=_judging_dtype(deviations, trial.variant.dtype), model=model, **keywords)
    except (ToleranceUndefined, AttentionInputError):
        return None

    def pick(oracle, name):
        if name in ("dq", "dk", "dv"):
            index = ("dq", "dk", "dv").index(name)
            return oracle.grads[index], oracle.allowances[index]
        return oracle.mod_grads[name[1:]]

    outputs = []
    for name, got in zip(names, grads, strict=True):
        exact, _ = pick(reference, name)
        expected, allowance = pick(predicted, name)
        outputs.append(_Judged(GRADIENT_NAMES[name], got.astype(np.float64), exact, expected,
                               allowance.bound + _extra(deviations, call, name, got.shape), key=name))
    if call.poisoned:  # rows that see the poison: non-finite gradients there conform
        seeing = rows_to_gradients(call, ~np.isfinite(call.oracle.out).all(axis=-1))
        for judged in outputs:
            if judged.key in seeing:
                judged.free = seeing[judged.key]
    singles = {}  # on `source`: a poisoned call's models where no row sees the poison are those of its garbage
    for deviation in model.deviations:
        single_model = DeviantModel((deviation,), call.tiles)
        single_grads = attention_backward(source.q, source.k, source.v, source.d_out, model=single_model, **keywords)
        single_mods = score_mod_gradients(source.q, source.k, source.v, source.d_out, model=single_model, **keywords)
        singles[deviation] = {**dict(zip(("dq", "dk", "dv"), single_grads, strict=True)),
                              **{f"d{key}": value for key, value in single_mods.items()}}
    _explain_each(outputs, deviations, call, keywords, trial.variant.dtype, singles, gradients=True)
    return outputs


def judge_pack(trial, problem, arrays: tuple, raw: object, call_again) -> object:
    """A varlen pack whose unused positions hold a poison, in deviation mode: when a declared deviation says the
    poison reaches the pack's rows, the elements it predicts must be non-finite, and the property sees the same call
    made again with finite garbage in their place (`call_again(arrays)`), which it then judges as any other."""
    __tracebackhide__ = True
    run = active()
    packed = [as_numpy(x) for x in arrays[:3]]
    if run is None or any(x is None for x in packed) or all(np.all(np.isfinite(x)) for x in packed):
        return raw
    out = as_numpy(raw[0] if isinstance(raw, tuple) else raw)
    for deviation in run.deviations:
        reached = getattr(deviation, "reached_in_pack", None)
        predicted = reached(*(x.astype(np.float64) for x in packed)) if reached else None
        if predicted is None or out is None or out.shape != predicted.shape:
            continue
        bad = predicted & np.isfinite(out)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            trial.fail("the packed output differs from what the declared deviations predict", problem,
                       details=(f"out{list(where)} = {out[where]!r}, which {deviation.describe()} says is non-finite",
                                f"elements outside the prediction: {int(bad.sum())} of {bad.size}"))
        run.record(deviation, _where(predicted, "the pack's out"), int(predicted.sum()))
        return call_again(tuple(finite_garbage(x) for x in packed) + tuple(arrays[3:]))
    return raw


def judge_raise(trial, problem, summary: str, extra: Mapping | None = None, d_out: np.ndarray | None = None) -> None:
    """In deviation mode, end the run as explained when a declared deviation explains the call (made with `extra`;
    a backward's, with the cotangent `d_out`) raising."""
    run = active()
    if run is None:
        return
    error = summary.removeprefix("the implementation raised ")
    call = deviation_call(trial, problem, extra, d_out=d_out)
    for deviation in run.deviations:
        if deviation.explains_raise(call, error):
            run.record(deviation, f"the call raising {error.splitlines()[0][:120]}")
            raise ExplainedStop


def accepted_reading(trial, problem, raw: object, accepted: str, deviations) -> tuple | None:
    """The first of `deviations` that says how the implementation reads the bad input of `problem`, with the output
    as that reading makes it and, unless the reading's output is undefined, that output's oracle and allowance (the
    other deviations' model, their judging dtype); None when none reads it or what came back is not of its shape
    (an output of another shape is no reading, whatever the deviation)."""
    call = deviation_call(trial, problem)
    model = DeviantModel(deviations)  # what it computes from the input it read: the other deviations too
    judging = _judging_dtype(deviations, trial.variant.dtype)
    returned = as_numpy(raw)
    for deviation in deviations:
        read = deviation.accepts(call, accepted)
        if read is None or returned is None:
            continue
        out = deviation.accepted_output(returned)
        if deviation.output_undefined():  # nothing to judge in what it returned but its shape
            if out.shape == read.q.shape[:3] + (read.v.shape[-1],):
                return deviation, read, out, None, None, model
            continue
        try:
            result, allowance = forward_allowance(read.q, read.k, read.v, dtype=judging, model=model,
                                                  **read.oracle_keywords())
        except (ToleranceUndefined, AttentionInputError):
            continue
        if out.shape == result.out.shape:
            return deviation, read, out, result, np.broadcast_to(allowance.bound, out.shape), model
    return None


def judge_acceptance(trial, problem, raw: object, accepted: str) -> None:
    """In deviation mode, end the run as explained when a declared deviation says how the implementation reads the
    input it accepted, and its output is that reading's oracle; a wrong output fails here."""
    __tracebackhide__ = True
    run = active()
    if run is None:
        return
    found = accepted_reading(trial, problem, raw, accepted, run.deviations)
    if found is None:
        return
    deviation, read, out, result, allowed, model = found
    if result is None:
        run.record(deviation, f"accepting {accepted} (its output undefined)")
        raise ExplainedStop
    got = out.astype(np.float64)
    bad = _bad(got, result.out, allowed, np.zeros(got.shape, bool))
    if bad.any():
        _fail(trial, problem, f"out (accepting {accepted})", got, result.out, allowed, np.zeros(got.shape, bool), bad,
              run)
    run.record(deviation, f"accepting {accepted}")
    keywords = read.oracle_keywords()
    reference = forward_allowance(read.q, read.k, read.v, dtype=trial.variant.dtype, **keywords)[0].out
    for other in model.deviations:  # what the reading's output owes to the other deviations
        if _differs(DeviantModel((other,))(read.q, read.k, read.v, **keywords).out, reference).any():
            run.record(other, f"the output of the accepted {accepted}")
    raise ExplainedStop


def judge_report(summary: str, observed: Mapping) -> None:
    """In deviation mode, end the run as explained when a declared deviation explains a property's own finding."""
    run = active()
    if run is None or not observed:
        return
    for deviation in run.deviations:
        if deviation.explains_report(summary, observed):
            run.record(deviation, summary.splitlines()[0][:120])
            raise ExplainedStop
