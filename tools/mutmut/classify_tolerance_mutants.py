"""Classify the surviving mutants of the tolerance model (`python -m tools.mutmut.classify_tolerance_mutants`, after
`mutmut run`; tox -e mutants runs it).

A surviving mutant of specs/tolerance/ either only loosens an allowance (every bound it gives on a fixed
set of problems is at least the original's: killing it would need a test that hard-codes the formula, which
the suite does not do), or tightens one somewhere (a real gap: correct code stays inside the tightened
bound on the suite's tests, or no test reaches that input), or breaks it (an error or NaN). The mutant is
switched on in process through mutmut's trampoline (MUTANT_UNDER_TEST) on the mutated copy in mutants/.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DTYPES = ("float64", "float32", "float16")


def _problems():
    from specs.problems import build

    return [build(n_q=5, n_k=7, d=4, d_v=3, seed=1), build(n_q=9, n_k=33, d=16, d_v=16, seed=2, causal=True),
            build(n_q=4, n_k=6, d=3, d_v=3, seed=3, score_style="large"),
            build(n_q=6, n_k=6, d=8, d_v=8, seed=4, mask_layout="full", empty_rows=True),
            build(batch=2, heads=4, heads_kv=2, n_q=17, n_k=17, d=8, d_v=8, seed=5, value_style="offset")]


def _bounds(tolerance) -> list[np.ndarray]:
    """Every allowance the model gives on the fixed problems (forward, lse, dot products)."""
    found = []
    for p in _problems():
        kwargs = p.kwargs()
        for dtype in DTYPES:
            try:
                oracle, allowance = tolerance.forward_allowance(p.q, p.k, p.v, dtype=dtype, **kwargs)
            except tolerance.ToleranceUndefined:
                continue
            found += [allowance.bound, allowance.take((..., slice(0, 1))).bound,
                      tolerance.lse_allowance(p.q, p.k, p.v, dtype=dtype, oracle=oracle, **kwargs).bound]
        found.append(tolerance.dot_product_allowance(p.q, p.q).bound)
    return found


def classify(name: str, tolerance, original: list[np.ndarray]) -> str:
    os.environ["MUTANT_UNDER_TEST"] = name
    try:
        with np.errstate(all="ignore"):
            mutated = _bounds(tolerance)
    except Exception as exc:  # a mutant that raises on an input the tests never gave it
        return f"breaks ({type(exc).__name__})"
    finally:
        os.environ["MUTANT_UNDER_TEST"] = ""
    if len(mutated) != len(original) or any(np.any(~np.isfinite(m) & np.isfinite(o))
                                            for m, o in zip(mutated, original, strict=False)):
        return "breaks (NaN or a missing bound)"
    if all(np.all(np.broadcast_to(m, o.shape) >= o) for m, o in zip(mutated, original, strict=True)):
        return "loosens only"
    return "tightens somewhere"


def main() -> int:
    metas = sorted((ROOT / "mutants" / "specs" / "tolerance").glob("*.py.meta"))
    if not metas:
        print("no mutmut results for specs/tolerance/: run `mutmut run` first")
        return 1
    survivors = [name for meta in metas
                 for name, code in json.loads(meta.read_text())["exit_code_by_key"].items() if code == 0]
    sys.path.insert(0, str(ROOT / "mutants"))
    os.environ["MUTANT_UNDER_TEST"] = ""
    from specs import tolerance

    original = _bounds(tolerance)
    verdicts = {name: classify(name, tolerance, original) for name in survivors}
    for name, verdict in sorted(verdicts.items()):
        print(f"{verdict:<28} {name}")
    print("tolerance survivors: " + ", ".join(f"{n} {v}" for v, n in Counter(verdicts.values()).most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
