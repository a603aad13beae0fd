"""One implementation on one problem: its inputs, its calls, the oracle, and checks that explain themselves.

A call that breaks CONTRACT 1 (harness.engine.guarded_call; a crash of an isolated worker, harness.engine.isolation)
and a comparison beyond the tolerance (harness.api.assertions) both fail the property with a violation that
carries the input and a reproduction snippet (harness.api.repro); the run goes on. The helpers on that path
set `__tracebackhide__`, so pytest's traceback shows the property's line and the violation, not their frames.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from hypothesis import currently_in_test_context, note, reject, target
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from harness.api.assertions import compare
from harness.api.calls import ImplementationCalls
from harness.api.evidence import DeclaredViolation, PropertyViolation
from harness.api.explain import judge_acceptance, judge_gradients, judge_output, judge_raise, judge_report
from harness.api.perturb import perturbed_failure, perturbed_gradients, perturbed_output, perturbed_report
from harness.api.repro import call_line_for, repro_snippet
from harness.api.reproducible import first_check_snippet, reproducible, running_checks
from harness.engine.declarations import RUNNING, all_refuted
from harness.engine.explanation import active
from harness.engine.guarded_call import CallFailed, as_numpy, checked_array, non_finite_summary
from protocol.registry import Variant
from specs.derivations import values_of
from specs.dtypes import numpy_dtype
from specs.gradients import drawn_cotangent
from specs.layouts import to_layout
from specs.problems import Problem
from specs.reference import AttentionResult, repeat_kv
from specs.strategies import problems
from specs.tolerance import (
    Allowance,
    ToleranceUndefined,
    affine_image_allowance,
    difference_allowance,
    forward_allowance,
    lse_allowance,
    metamorphic_allowance,
    own_rounding_bound,
)


class Trial:
    """Checks what `variant` returns on problems derived from `problem`. Its calls are `self.calls`'
    (harness.api.calls: raw results or CallFailed); every way a check can fail ends in `fail`, which writes the
    violation and says there whether a refuted seed sentence expects it, and the declared deviations judge the
    example when it runs again under them (harness.api.explained_runs)."""

    def __init__(self, variant: Variant, problem: Problem, *, layout: str = "contiguous",
                 past_range: bool = False) -> None:
        self.variant = variant
        self.problem = problem
        self.layout = layout  # specs.layouts: how q, k, v are laid out in memory when passed
        # scores past the dtype's range are judged against float32 inside (specs.tolerance.forward_allowance)
        # instead of rejected
        self.past_range = past_range
        self.dtype = numpy_dtype(variant.dtype)
        self.calls = ImplementationCalls(variant, layout)  # the calls; this class judges what they return
        self._targets: list[str] = []
        self._drawn: tuple[int, np.ndarray] | None = None  # the last cotangent drawn, with its seed
        self.cotangent_seed: int | None = None  # that seed, while the last backward was called on it alone
        self._last_call: str | None = None  # the repro's line for the last forward call
        self.in_hypothesis = currently_in_test_context()
        running = RUNNING.get()
        if self.in_hypothesis:
            note(f"implementation {variant.name}; problem {problem!r}")
            if running is not None:
                running.count.saw(current_build_context())

    def reproduction_arguments(self) -> tuple[str, tuple, dict]:
        """The call that makes this trial again (a repro snippet writes it: harness.api.reproducible)."""
        return "Trial", (self.variant, self.problem), {"layout": self.layout, "past_range": self.past_range}

    # -- inputs -------------------------------------------------------------
    def inputs(self, problem: Problem | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, k, v in the implementation's dtype and the trial's layout; examples whose finite values do
        not fit the dtype are rejected (non-finite values a property placed on purpose are kept)."""
        problem = problem or self.problem
        originals = (problem.q, problem.k, problem.v)
        with np.errstate(over="ignore", invalid="ignore"):
            cast = tuple(x.astype(self.dtype) for x in originals)
        if not all(np.all(np.isfinite(c) | ~np.isfinite(x)) for c, x in zip(cast, originals, strict=True)):
            reject()  # the recipe's magnitudes do not fit this dtype
        return tuple(to_layout(x, self.layout) for x in cast)

    def exact_inputs(self, problem: Problem | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The values the implementation received, held in float64 for the oracle."""
        return tuple(x.astype(np.float64) for x in self.inputs(problem))

    def values_per_query_head(self, problem: Problem | None = None) -> np.ndarray:
        """The values the implementation received (float64), repeated so head h holds kv head h // group."""
        problem = problem or self.problem
        v = self.exact_inputs(problem)[2]
        return repeat_kv(v, problem.q.shape[1] // v.shape[1])

    def oracle_kwargs(self, problem: Problem | None = None) -> dict:
        problem = problem or self.problem
        alignment = self.variant.capabilities.causal_alignment
        return dict(problem.handed(self.variant.dtype).kwargs(), causal_alignment=alignment)

    # -- calls --------------------------------------------------------------
    def call_raw(self, problem: Problem | None = None, *, global_seed: int | None = None, **extra) -> object:
        """Call the implementation; turn any exception or overrun into a violation."""
        __tracebackhide__ = True
        problem = problem or self.problem
        return self.call_on(self.inputs(problem), problem, global_seed=global_seed, **extra)

    def call_on(self, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], problem: Problem, *,
                global_seed: int | None = None, **extra) -> object:
        """Call the implementation on these q, k, v (the caller keeps them, to see what the call did to them);
        `global_seed` seeds the global generators where the call runs, just before it (harness.engine.call_state)."""
        __tracebackhide__ = True
        kwargs = {**problem.handed(self.variant.dtype).kwargs(), **extra}
        self._last_call = call_line_for(extra, global_seed=global_seed)
        if extra.get("return_lse"):
            self._last_call = self._last_call.replace("out = ", "out, lse = ", 1)
        try:
            raw = perturbed_output(self, problem, extra, self.calls.forward(arrays, kwargs, global_seed))
        except CallFailed as failure:
            self._call_failed(problem, failure, extra)
        return judge_output(self, problem, extra, raw)

    def cotangent(self, problem: Problem, seed: int) -> np.ndarray:
        """The d_out a gradient property draws for `problem` (specs.gradients.drawn_cotangent) in the dtype: a
        failure of a backward called on it with the problem's keywords alone records `seed` (its figure draws
        the same)."""
        d_out = drawn_cotangent(problem.q.shape[:3] + (problem.v.shape[-1],), seed, self.dtype)
        self._drawn = (seed, d_out)
        return d_out

    def gradients(self, problem: Problem, d_out: np.ndarray, *, wrt: tuple[str, ...] = (),
                  **extra) -> tuple[np.ndarray, ...]:
        """dQ, dK, dV (and the gradients of the modification arrays named in `wrt`) of <d_out, the implementation's
        output on `problem`>, as harness.engine.backward.backward_of gives them; a failure fails the trial."""
        __tracebackhide__ = True
        plain = self._drawn is not None and d_out is self._drawn[1] and not extra and not wrt
        self.cotangent_seed = self._drawn[0] if plain else None
        kwargs = {**problem.handed(self.variant.dtype).kwargs(), **extra}
        try:
            grads = self.calls.backward(self.inputs(problem), d_out, kwargs, wrt)
            grads = perturbed_gradients(self, problem, d_out, extra, wrt, grads)
        except CallFailed as failure:
            self._call_failed(problem, failure, extra, d_out)
        return judge_gradients(self, problem, d_out, extra, wrt, grads)

    def _call_failed(self, problem: Problem, failure: CallFailed, extra: dict,
                     d_out: np.ndarray | None = None) -> NoReturn:
        """A call (made with `extra`; a backward's, with the cotangent `d_out`) that raised, crashed, ran past its
        limit or returned no array fails the trial, unless a declared deviation explains the raise (judge_raise,
        while the example runs again under them)."""
        __tracebackhide__ = True
        failure = perturbed_failure(self, problem, failure, extra, d_out)
        if failure.kind == "raised":
            judge_raise(self, problem, failure.summary, extra, d_out)
        self.fail(failure.summary, problem)

    def expect_raised(self, problem: Problem, accepted: str, **extra) -> str:
        """The summary of the error the implementation raises on `problem` (called with `extra`; a call that runs
        past the limit or crashes is still a failure); if it returns instead, a failure saying it accepted
        `accepted` (check_raises: its repro calls it again)."""
        __tracebackhide__ = True
        return check_raises(self, problem, accepted, **extra)

    def call(self, problem: Problem | None = None, *, global_seed: int | None = None, **extra) -> np.ndarray:
        """The implementation's output as float64, after checking its type, shape and dtype."""
        __tracebackhide__ = True
        problem = problem or self.problem
        raw = self.call_raw(problem, global_seed=global_seed, **extra)
        return self.check_output(raw, problem)

    def check_output(self, raw: object, problem: Problem, *, expect_shape: tuple[int, ...] | None = None,
                     finite: bool = True) -> np.ndarray:
        """The output as float64 after checking its type, shape and dtype, and (finite=True) that it is finite
        wherever the oracle is; finite=False leaves non-finite values for the caller to judge."""
        __tracebackhide__ = True
        b, h, n_q, _ = problem.q.shape
        try:
            out = checked_array(raw, shape=expect_shape or (b, h, n_q, problem.v.shape[-1]), dtype=self.dtype)
        except CallFailed as failure:
            self.fail(failure.summary, problem)
        summary = non_finite_summary(out) if finite else None
        if summary:
            self.oracle(problem)  # rejects inputs on which the baseline formula overflows in this dtype too
            self.fail(summary, problem)
        return out.astype(np.float64)

    # -- the oracle ---------------------------------------------------------
    def oracle(self, problem: Problem | None = None) -> tuple[AttentionResult, Allowance]:
        """The float64 oracle on the values the implementation received, and the allowed error."""
        problem = problem or self.problem
        q, k, v = self.exact_inputs(problem)
        try:
            return forward_allowance(q, k, v, dtype=self.dtype, past_range=self.past_range,
                                     **self.oracle_kwargs(problem))
        except ToleranceUndefined:
            if not self.in_hypothesis:
                raise
            reject()

    # -- verdicts -----------------------------------------------------------
    def fail(self, summary: str, problem: Problem | None = None, *, details: tuple[str, ...] = (),
             claim: str | None = None,
             observed: dict | None = None) -> NoReturn:
        """Raise the violation; `claim` names the claim whose assertion failed when a property checks several;
        `observed`: what a property measured itself (a checker's report, a memory growth), which a declared
        deviation may explain (harness.api.explain.judge_report). Its repro calls the running @reproducible check
        again where there is one (harness.api.reproducible), else makes this trial's last call and prints its
        verdict. The snippet is written when the violation's repro is first read."""
        __tracebackhide__ = True
        summary, observed = perturbed_report(summary, observed or {})
        judge_report(summary, observed)
        problem = problem or self.problem
        checks, call_line = running_checks(), self._last_call  # as they are now: the snippet is written later

        def repro() -> str:
            return first_check_snippet(checks) or repro_snippet(
                problem, target=self.variant.impl.target, dtype=self.variant.dtype, layout=self.layout,
                causal_alignment=self.variant.capabilities.causal_alignment, call_line=call_line,
                past_range=self.past_range, tensors=self.variant.capabilities.tensors)

        fields = dict(impl=self.variant.name, problem=problem, details=details, repro=repro, claim=claim,
                      cotangent_seed=self.cotangent_seed)
        violation = PropertyViolation(summary, **fields)
        running = RUNNING.get()
        if running is not None:
            running.count.failed()
        if running is not None and all_refuted((claim,) if claim else running.claims, violation.message()):
            raise DeclaredViolation(summary, **fields) from None
        # from None: the violation says what failed; what it was handling (a CallFailed, say) stays in
        # __context__ without its frames in the traceback
        raise violation from None

    def expect_close(self, got: np.ndarray, expected: np.ndarray, allowance: Allowance, *,
                     what: str = "out", versus: str = "the float64 oracle",
                     problem: Problem | None = None, claim: str | None = None) -> float:
        """Fail, naming the worst element, unless |got - expected| <= allowance everywhere; else return the
        largest |error| / allowed (the headroom, for evidence)."""
        __tracebackhide__ = True
        comparison = compare(got, expected, allowance, what=what)
        if comparison.within:
            self._target(comparison.ratio, what)
            return comparison.ratio
        self.fail(f"{what} differs from {versus} beyond the tolerance", problem, details=comparison.details,
                  claim=claim)

    def expect_unchanged(self, transformed: Problem, *, what: str, versus: str, got_index: tuple = (...,),
                         expected_index: tuple = (...,)) -> float:
        """A metamorphic property: the output on `transformed` (at got_index) equals the output on
        this trial's problem (at expected_index), within specs.tolerance.metamorphic_allowance; returns the
        largest |error| / allowed. `transformed` must come from this trial's problem through Problem.derive, so
        the repro rebuilds it and calls the same comparison again (check_unchanged)."""
        __tracebackhide__ = True
        self._require_derived(transformed, "expect_unchanged")
        return check_unchanged(self, transformed, what=what, versus=versus, got_index=got_index,
                               expected_index=expected_index)

    def expect_affine_image(self, transformed: Problem, a: float, b: np.ndarray, *, what: str, versus: str) -> float:
        """A metamorphic property: the output on `transformed` equals a x (the output on this trial's problem) + b,
        a a scalar and b broadcasting to the output, within the two outputs' allowances and own rounding
        (metamorphic_allowance, with the expected side's carried through specs.tolerance.affine_image_allowance);
        returns the largest |error| / allowed. `transformed` must come from this trial's problem through
        Problem.derive, so the repro rebuilds it and calls the same comparison again (check_affine_image)."""
        __tracebackhide__ = True
        self._require_derived(transformed, "expect_affine_image")
        return check_affine_image(self, transformed, a, b, what=what, versus=versus)

    def unchanged_comparison(self, transformed: Problem, got_index: tuple = (...,),
                             expected_index: tuple = (...,)) -> tuple[np.ndarray, np.ndarray, Allowance]:
        """expect_unchanged's comparison: the output on `transformed` at got_index, the output on this trial's
        problem at expected_index, and the metamorphic allowance between them."""
        __tracebackhide__ = True
        sides = [self.output_with_own_bound(problem) for problem in (transformed, self.problem)]
        (got, got_allowance, got_own), (expected, expected_allowance, expected_own) = (
            (out[index], allowance.take(index), own.take(index))
            for (out, allowance, own), index in zip(sides, (got_index, expected_index), strict=True))
        return got, expected, metamorphic_allowance(got_allowance, expected_allowance, got_own, expected_own)

    def affine_comparison(self, transformed: Problem, a: float,
                          b: np.ndarray) -> tuple[np.ndarray, np.ndarray, Allowance]:
        """expect_affine_image's comparison: the output on `transformed`, a x the output on this trial's problem
        + b, and the allowance between them."""
        __tracebackhide__ = True
        got, got_allowance, got_own = self.output_with_own_bound(transformed)
        out, allowance, own = self.output_with_own_bound(self.problem)
        bound = difference_allowance(got_allowance + got_own, affine_image_allowance(allowance + own, a, out, b))
        return got, a * out + b, bound

    def _require_derived(self, transformed: Problem, helper: str) -> None:
        if (transformed.steps[:len(self.problem.steps)] != self.problem.steps
                or len(transformed.steps) == len(self.problem.steps)):
            raise ValueError(f"{helper} needs a problem derived from the trial's own by Problem.derive")

    def own_output(self, problem: Problem | None = None) -> tuple[np.ndarray, Allowance]:
        """The implementation's own output on `problem` (contiguous inputs), and the allowance for another of
        its outputs that must equal it: a metamorphic comparison, so a wrong formula that is wrong the same
        way both times is not blamed on the property that compares them."""
        __tracebackhide__ = True
        contiguous = Trial(self.variant, problem or self.problem)
        out, allowance, own = contiguous.output_with_own_bound(contiguous.problem)
        return out, metamorphic_allowance(allowance, allowance, own, own)

    def output_with_own_bound(self, problem: Problem) -> tuple[np.ndarray, Allowance, Allowance]:
        """The output on `problem`, its oracle allowance, and the bound on the rounding of whatever weights the
        implementation applies (specs.tolerance.own_rounding_bound, read from its output on |V|)."""
        __tracebackhide__ = True
        out = self.call(problem)
        oracle, allowance = self.oracle(problem)
        on_abs = self.call(problem.derive(values_of, "abs"))
        own = own_rounding_bound(oracle, *self.exact_inputs(problem), on_abs, dtype=self.dtype)
        return out, allowance, own

    def _target(self, ratio: float, what: str) -> None:
        """Record the headroom, and steer the `thorough` profile towards inputs where the error nears
        its allowance."""
        running = RUNNING.get()
        if running is not None and np.isfinite(ratio) and active() is None:
            running.passed_within(ratio)
        # the record named: the records of a group are judged in one Hypothesis example (record_groups), and a label
        # is observed once per example
        label = f"{self.variant.name}: {what} error / allowed #{len(self._targets)}"
        self._targets.append(label)
        if self.in_hypothesis and np.isfinite(ratio) and active() is None:  # a second run targets nothing anew
            target(ratio, label=label)


def problems_for(variant: Variant, **options) -> st.SearchStrategy[Problem]:
    """Problems this variant can be asked to solve (its capabilities and dtype)."""
    return problems(caps=variant.capabilities, dtype=variant.dtype, **options)


@reproducible
def check_against_oracle(variant: Variant, problem: Problem, *, past_range: bool = False, **extra) -> None:
    """The central check: the implementation's output is within the tolerance model of the oracle."""
    __tracebackhide__ = True
    trial = Trial(variant, problem, past_range=past_range)
    oracle, allowance = trial.oracle()
    trial.expect_close(trial.call(**extra), oracle.out, allowance)


@reproducible
def check_out_and_lse_against_oracle(variant: Variant, problem: Problem, **extra) -> None:
    """One return_lse=True call (a record with capability lse): the output within the tolerance model of the
    oracle, and the log-sum-exp equal to the oracle's where that is infinite (a row that sees no key: -inf, or its
    sink) and within specs.tolerance.lse_allowance elsewhere; `extra`: keywords the call adds (block sizes)."""
    __tracebackhide__ = True
    trial = Trial(variant, problem)
    raw = trial.call_raw(problem, return_lse=True, **extra)
    if not isinstance(raw, tuple) or len(raw) != 2:
        trial.fail("declared lse=True but return_lse=True did not return (out, lse)")
    oracle, allowance = trial.oracle()
    trial.expect_close(trial.check_output(raw[0], problem), oracle.out, allowance)
    lse = as_numpy(raw[1])
    if lse is None or lse.shape != oracle.lse.shape:
        trial.fail(f"return_lse=True returned lse of shape {getattr(raw[1], 'shape', None)}, expected "
                   f"(batch, heads, n_q) = {oracle.lse.shape}")
    lse = lse.astype(np.float64)
    infinite = ~np.isfinite(oracle.lse)
    wrong = infinite & (lse != oracle.lse)
    if wrong.any():
        where = tuple(int(i) for i in np.argwhere(wrong)[0])
        trial.fail("lse differs from the oracle's where that is infinite",
                   details=(f"lse{list(where)} = {lse[where]!r}, expected {oracle.lse[where]!r}",))
    try:
        bound = lse_allowance(*trial.exact_inputs(), dtype=variant.dtype, oracle=oracle, **trial.oracle_kwargs())
    except ToleranceUndefined:
        reject()  # the naive log-sum-exp overflows in this dtype: the rule has nothing to scale
    trial.expect_close(np.where(infinite, 0.0, lse), np.where(infinite, 0.0, oracle.lse), bound, what="lse")


@reproducible
def check_unchanged(trial: Trial, transformed: Problem, *, what: str, versus: str, got_index: tuple = (...,),
                    expected_index: tuple = (...,)) -> float:
    """Trial.expect_unchanged's comparison, a module-level check so that its repro calls it again."""
    __tracebackhide__ = True
    got, expected, bound = trial.unchanged_comparison(transformed, got_index, expected_index)
    return trial.expect_close(got, expected, bound, what=what, versus=versus)


@reproducible
def check_affine_image(trial: Trial, transformed: Problem, a: float, b: np.ndarray, *, what: str,
                       versus: str) -> float:
    """Trial.expect_affine_image's comparison, a module-level check so that its repro calls it again."""
    __tracebackhide__ = True
    got, expected, bound = trial.affine_comparison(transformed, a, b)
    return trial.expect_close(got, expected, bound, what=what, versus=versus)


@reproducible
def check_raises(trial: Trial, problem: Problem, accepted: str, **extra) -> str:
    """Trial.expect_raised's check, a module-level one so that its repro calls it again: the summary of the error
    the implementation raises on `problem`, or a failure saying it accepted `accepted`."""
    __tracebackhide__ = True
    try:
        raw = trial.call_raw(problem, **extra)
    except PropertyViolation as violation:
        if not (isinstance(violation.__context__, CallFailed) and violation.__context__.kind == "raised"):
            raise
        return violation.__context__.summary
    judge_acceptance(trial, problem, raw, accepted)
    returned = tuple(raw.shape) if hasattr(raw, "shape") else type(raw).__name__
    trial.fail(f"accepted {accepted} and returned {returned} instead of raising", problem)
