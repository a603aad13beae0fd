"""A failed property, carried as data: what failed, on which input, and how to see it again."""

from __future__ import annotations

from collections.abc import Callable

from specs.problems import Problem


class PropertyViolation(AssertionError):
    """A property does not hold for an implementation.

    Hypothesis re-raises the exception of the smallest failing example, so the
    report plugin reads the counterexample from these attributes. `repro` may be a function that writes the
    snippet: it is called once, when the snippet is first read (shrinking raises many violations that nobody reads).
    """

    def __init__(self, summary: str, *, impl: str | None = None, problem: Problem | None = None,
                 details: tuple[str, ...] = (), repro: str | Callable[[], str] = "", claim: str | None = None,
                 cotangent_seed: int | None = None) -> None:
        self.summary = summary
        # the seed of the d_out (specs.gradients.drawn_cotangent) of a failing backward called with the problem's
        # keywords alone: what its figure draws again
        self.cotangent_seed = cotangent_seed
        self.claim = claim  # in a property checking several claims: the one whose assertion failed
        self.impl = impl
        self.problem = problem
        self.details = tuple(details)
        self._repro = repro
        super().__init__(summary)

    @property
    def repro(self) -> str:
        """The reproduction snippet, written on first reading; where writing it raises (a problem whose code no
        longer rebuilds it: specs.problems.CodeMismatch), a comment saying so, which the report shows."""
        if callable(self._repro):
            try:
                self._repro = self._repro()
            except Exception as exc:
                self._repro = f"# no snippet: writing it raised {type(exc).__name__}: {exc}"
        return self._repro

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        lines = [self.summary]
        if self.impl:
            lines.append(f"  implementation: {self.impl}")
        if self.problem is not None:
            lines.append(f"  input: {self.problem.describe()}")
        lines += [f"  {line}" for line in self.details]
        if self.repro:
            lines.append("  reproduce:")
            lines += [f"    {line}" for line in self.repro.splitlines()]
        return "\n".join(lines)

    def message(self) -> str:
        """What declarations and refutations are matched against: the summary, the details and the
        input's recipe (so a declaration can name the inputs it fails on, e.g. score_style='large')."""
        lines = [self.summary, *self.details]
        if self.problem is not None:
            lines.append(f"input: {self.problem!r}")
        return "\n".join(lines)

    def noted(self, note: str) -> PropertyViolation:
        """The same violation with `note` first among its details (what the declared deviations explained)."""
        return PropertyViolation(self.summary, impl=self.impl, problem=self.problem, details=(note, *self.details),
                                 repro=self._repro, claim=self.claim, cotangent_seed=self.cotangent_seed)

    def counterexample(self) -> dict:
        """The JSON form written to report.json."""
        return {
            "problem": None if self.problem is None else repr(self.problem),
            "shapes": None if self.problem is None else self.problem.describe(),
            "details": list(self.details),
            "repro": self.repro,
            **({} if self.cotangent_seed is None else {"cotangent_seed": self.cotangent_seed}),
        }


class DeclaredViolation(PropertyViolation):
    """A violation a declaration or refutation covers: a type of its own, so Hypothesis reports it
    apart from any undeclared failure of the same property (report_multiple_bugs)."""
