"""Calls of an implementation's varlen and kv-cache faces (protocol.faces) from a property, under CONTRACT 1's
failure rules: a raise, an overrun or a wrong output fails the trial's property. A property makes its face calls
inside a @reproducible check (harness.api.reproducible), whose call a failure's repro makes again. An isolated
implementation's face calls run in its worker (harness.engine.isolation), as its dense calls do, so a face that
crashes its process is a verdict too."""

from __future__ import annotations

import numpy as np

from harness.api.evidence import PropertyViolation
from harness.api.explain import judge_pack, judge_raise
from harness.api.perturb import perturbed_pack
from harness.api.trial import Trial
from harness.engine import run_context
from harness.engine.guarded_call import CallFailed, call_in_process, checked_array
from harness.engine.isolation import call_isolated
from specs.problems import Problem


def call_face(trial: Trial, face: str, arrays: tuple[np.ndarray, ...], keywords: dict, problem: Problem) -> object:
    """impl.face(face)(*arrays, **keywords) as the implementation takes its tensors; a failure fails the trial."""
    __tracebackhide__ = True
    impl = trial.variant.impl

    def call(inputs: tuple) -> object:
        try:
            if impl.target in run_context.current().isolated_targets:
                return call_isolated(impl.target, inputs, "contiguous", keywords, face=face)
            return call_in_process(impl.face(face), inputs, keywords, impl.capabilities.tensors)
        except CallFailed as failure:
            if failure.kind == "raised":
                judge_raise(trial, problem, failure.summary)
            trial.fail(failure.summary, problem)

    raw = call(arrays)
    if face != "varlen":
        return raw
    return judge_pack(trial, problem, arrays, perturbed_pack(arrays, raw), call)


def face_output(trial: Trial, raw: object, shape: tuple[int, ...], problem: Problem) -> np.ndarray:
    """A face's output as float64 NumPy after checking its type, shape and dtype."""
    __tracebackhide__ = True
    try:
        return checked_array(raw, shape=shape, dtype=trial.dtype).astype(np.float64)
    except CallFailed as failure:
        trial.fail(failure.summary, problem)


def expect_face_raised(trial: Trial, face: str, arrays: tuple[np.ndarray, ...], keywords: dict, problem: Problem,
                       accepted: str) -> str:
    """The summary of the error the face raises; a failure saying it accepted `accepted` if it returns."""
    __tracebackhide__ = True
    try:
        call_face(trial, face, arrays, keywords, problem)
    except PropertyViolation as violation:
        if not (isinstance(violation.__context__, CallFailed) and violation.__context__.kind == "raised"):
            raise
        return violation.__context__.summary
    trial.fail(f"accepted {accepted} instead of raising", problem)
