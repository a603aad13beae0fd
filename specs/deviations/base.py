"""What a documented deviation is: a named behaviour of an implementation that departs from the specification, and
the prediction it makes for one call (CONTRACT 2: a declaration names the claim, the dtypes and the deviation).

A deviation never reads the implementation's output. From the call alone (the values the implementation received,
its keywords, its dtype) it says which elements of the call's outputs it explains and what they must be:
- a model (`transform`): the oracle's formula changed as the implementation changes it (a row with no visible key
  averaged, key blocks normalised alone); the elements where the model differs from the oracle are explained, and
  must equal the model within the one tolerance model's allowance for it (specs.tolerance, `model=`);
- a precision (`judging_dtype`, `naive`): every element is explained, and judged by the tolerance model of
  another precision or of a naive formula that rounds where the implementation rounds;
- non-finite elements (`non_finite`): elements that must each be NaN or infinite (a poison that reaches rows);
- undefined elements (`undefined`): a kernel's output read from memory no thread wrote, explained with no value;
- a raised error, an accepted input, a checker's report (`explains_raise`, `accepts`, `explains_report`).
Every other element of the call is judged against the oracle as before.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from specs.reference import AttentionResult, attention, repeat_kv

OUTPUTS = ("out", "lse", "dq", "dk", "dv", "dbias", "dsinks")  # what a call returns that a deviation may explain


class DeviationError(ValueError):
    """A deviation named or parametrised wrongly in a declaration."""


@dataclass(frozen=True)
class Call:
    """One call of an implementation as a deviation reads it: the values it received (held in float64), the
    keywords of its problem (specs.problems.Problem.kwargs), the implementation's dtype and causal alignment, for a
    backward call the cotangent, and the tile keywords it passed."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    keywords: Mapping = field(default_factory=dict)
    dtype: str = "float64"
    causal_alignment: str = "top_left"
    d_out: np.ndarray | None = None
    tiles: Mapping = field(default_factory=dict)  # the call's tile keywords (block sizes), which the oracle ignores

    def oracle_keywords(self) -> dict:
        """What specs.reference.attention takes for this call (arrays in float64)."""
        keywords = {name: value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype.kind == "f"
                    else value for name, value in self.keywords.items()}
        return dict(keywords, causal_alignment=self.causal_alignment)

    def read_by(self, deviations: tuple[Deviation, ...]) -> Call:
        """The call as an implementation with `deviations` reads it (a keyword one of them never reads dropped):
        what each other deviation's prediction is made for."""
        keywords = dict(self.keywords)
        for deviation in deviations:
            keywords = deviation.read_keywords(keywords)
        return self if keywords.keys() == self.keywords.keys() else dataclasses.replace(self, keywords=keywords)

    @functools.cached_property
    def poisoned(self) -> bool:
        """Whether q, k or v holds NaN or Inf."""
        return not all(np.all(np.isfinite(x)) for x in (self.q, self.k, self.v))

    @functools.cached_property
    def oracle(self) -> AttentionResult:
        """The float64 oracle (non-finite inputs allowed where no query sees them)."""
        with np.errstate(all="ignore"):
            return attention(self.q, self.k, self.v, finite=not self.poisoned, **self.oracle_keywords())

    @functools.cached_property
    def ieee_scores(self) -> np.ndarray:
        """The scaled scores (then capped, plus the bias) of every row and key as IEEE arithmetic makes them from the
        inputs as they are: NaN from a NaN, +-inf or NaN from an Inf."""
        keywords = self.oracle_keywords()
        with np.errstate(all="ignore"):
            products = self.q[..., :, None, :] * repeat_kv(self.k, self.group)[..., None, :, :]
            scores = products.sum(axis=-1) * self.oracle.scale
            cap = keywords.get("softcap") or 0.0
            if cap > 0:
                scores = cap * np.tanh(scores / cap)
            if keywords.get("bias") is not None:
                scores = scores + keywords["bias"]
        return scores

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.k.shape[1]


class Deviation:
    """A documented behaviour. Subclasses set `name`, `summary` (one sentence, what the behaviour is and where it
    comes from) and `parameters` (name -> what it means), and override the predictions they make."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    parameters: ClassVar[dict[str, str]] = {}

    def __init__(self, **params: object) -> None:
        unknown = sorted(set(params) - set(self.parameters))
        if unknown:
            raise DeviationError(f"deviation {self.name!r} takes no parameter {unknown}; its parameters: "
                                 f"{sorted(self.parameters) or 'none'}")
        self.params = dict(params)

    def positive_int(self, parameter: str) -> int:
        """The declared `parameter`, which must be a positive int (not a bool), or a DeviationError naming it and
        what it means."""
        value = self.params.get(parameter)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DeviationError(f"{self.name}: {parameter} is a positive int ({self.parameters[parameter]}), got "
                                 f"{value!r}")
        return value

    def describe(self) -> str:
        """Its name and parameters, as a declaration writes them."""
        if not self.params:
            return self.name
        return f"{self.name} ({', '.join(f'{key}={value!r}' for key, value in sorted(self.params.items()))})"

    def content_key(self) -> str:
        return self.describe()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deviation) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(self.describe())

    def __repr__(self) -> str:
        return f"<deviation {self.describe()}>"

    # -- the predictions (each a function of the call alone) -------------------------------------------------
    def read_keywords(self, keywords: dict) -> dict:
        """The call's keywords as the implementation reads them (a keyword it never reads dropped): its model is
        the oracle's formula on these, so deviations that each drop one compose."""
        return keywords

    def transform(self, result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  keywords: dict) -> AttentionResult:
        """The oracle's result as the implementation computes it, in the inputs' precision (its model); the oracle's
        own result when this deviation changes no value."""
        return result

    def judging_dtype(self, dtype: str) -> str:
        """The precision whose tolerance model judges the implementation's outputs."""
        return dtype

    def output_dtypes(self, dtype: str) -> tuple[str, ...]:
        """The dtypes the implementation may return for `dtype` inputs."""
        return (dtype,)

    def explains_everything(self, dtype: str) -> bool:
        """Whether every element of every call is judged by this deviation's rule (a precision deviation)."""
        return self.judging_dtype(dtype) != dtype

    def extra_allowance(self, call: Call) -> dict[str, np.ndarray]:
        """Output name -> an allowance added to the tolerance model's for that output, where the model's own
        rounding is not the implementation's (its formula rounds at another magnitude)."""
        return {}

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Output name -> (mask, values): elements the deviation predicts directly, each within the tolerance model's
        allowance of its value (a row a poison turns into zeros; an outside implementation's own prediction).
        Values where the inputs hold NaN or Inf are judged exactly."""
        return {}

    def non_finite(self, call: Call) -> dict[str, np.ndarray]:
        """Output name -> boolean mask of the elements of a forward call that must each be non-finite."""
        return {}

    def undefined(self, call: Call) -> dict[str, np.ndarray]:
        """Output name -> boolean mask of elements whose value is undefined (read from memory no thread wrote, or
        wrote under a race, or within its error of an overflow, which may take it either side): explained, with no
        value to meet (a forward's out or lse, a backward's gradients)."""
        return {}

    def non_finite_gradients(self, call: Call) -> dict[str, np.ndarray]:
        """The same for a backward call's gradients (dq, dk, dv, dbias, dsinks)."""
        return {}

    def replaces_poison(self) -> bool:
        """Whether a poisoned call is judged again on the same example with finite garbage in place of the poison
        (what the rest of its elements must be)."""
        return False

    def explains_raise(self, call: Call, error: str) -> bool:
        """Whether the call raising `error` ('TypeError: ...') is this behaviour."""
        return False

    def accepts(self, call: Call, accepted: str) -> Call | None:
        """For a call the protocol says must raise (`accepted` names the bad input), the call whose oracle the
        accepting implementation computes instead (None: not this behaviour)."""
        return None

    def accepted_output(self, out: np.ndarray) -> np.ndarray:
        """The output of an input it accepts, in the shape the protocol gives that reading's oracle."""
        return out

    def output_undefined(self) -> bool:
        """Whether an input it accepts gives an undefined output (nothing to judge but the acceptance)."""
        return False

    def explains_report(self, summary: str, observed: Mapping) -> bool:
        """Whether a property's own finding (a checker's report, a measurement: `observed`) is this behaviour."""
        return False


class PatternDeviation(Deviation):
    """A deviation read off an error's text: `match`, a regular expression under 200 characters searched in it."""

    LIMIT = 200

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        pattern = params.get("match")
        if not isinstance(pattern, str) or not pattern:
            raise DeviationError(f"deviation {self.name!r} needs `match`, a regular expression of the error's text")
        if len(pattern) > self.LIMIT:
            raise DeviationError(f"deviation {self.name!r}: `match` has {len(pattern)} characters; keep it under "
                                 f"{self.LIMIT} (the error's type and a few words of its text)")
        try:
            self.pattern = re.compile(pattern)
        except re.error as exc:
            raise DeviationError(f"deviation {self.name!r}: `match` is not a valid regex ({exc})") from None
