"""Problems built by functions: every step of the project, called as a property calls it, is rebuilt bit for bit from
the line the repro snippet prints (specs.problem_code reads it back, running nothing), and what would print a
misleading line is refused: a function that is no step, an argument that is no literal, a step that changes the
problem it derives from or draws other numbers when called again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.repro import repro_snippet
from harness.api.trial import Trial
from protocol.registry import Variant, load_impl
from specs import constructions, derivations, examples
from specs.keyword_edges import BAD_SCORE_MODS, LSE_SCORE_EDGES, SCALE_TYPES, SCALE_VALUES, with_mask, with_scale
from specs.literals import NotALiteral
from specs.problem_code import check_code, rebuild, steps
from specs.problems import CodeMismatch, build, problem_step, queries_scaled
from specs.validation import AttentionInputError
from tests.fixtures.runs import ROOT
from zoo.declared import positional_bias

TILED = "impls.numpy.numpy_tiled:tiled_attention"
MASKED = build(batch=2, heads=4, heads_kv=2, n_q=5, n_k=6, d=4, d_v=3, seed=3, mask_layout="full")
SIXTEEN = build(heads=2, heads_kv=1, n_q=6, n_k=7, d=16, d_v=3, seed=4, score_style="integers")
TOKENS = build(n_q=8, n_k=8, d=8, d_v=8, seed=5)
# step -> (the problem it is applied to, its arguments, its keywords): every step of STEP_MODULES, as properties call it
EXAMPLES = {
    "queries_scaled": (MASKED, (1e-20,), {}),
    "with_keywords": (MASKED, (), {"scale": np.float32(-0.25), "softcap": float("nan"), "window_size": (1, 0)}),
    "with_mask_pattern": (MASKED, ("hides one key per row", (2, 1, 5, 6), [i % 6 for i in range(10)]), {}),
    "with_mask_entries": (MASKED, ((1, None, [0, 3]), False), {}),
    "with_random_key_padding": (MASKED, (7, 0.3), {}),
    "positions_taken": (MASKED, (), {"queries": [4, 0, 1, 1], "keys": [5, 4, 3, 2, 1, 0]}),
    "spans_taken": (MASKED, (), {"queries": (0, 4), "keys": (2, 6)}),
    "heads_taken": (MASKED, (3, 1), {}),
    "kv_heads_repeated": (MASKED, (2,), {}),
    "heads_tiled": (MASKED, (3, True), {}),
    "values_of": (MASKED, ("half_plus_one",), {}),
    "one_hot_valued": (TOKENS, (9,), {}),
    "values_resized": (MASKED, (-1,), {}),
    "self_attention_of_queries": (TOKENS, (), {}),
    "values_affine": (MASKED, (-1.5, [1.0, -20.0, 3.0]), {}),
    "keys_translated": (MASKED, ([1.0, 0.0, -2.0, 2.0],), {}),
    "inputs_garbled": (MASKED, (), {}),
    "projected": (examples.worked_example_000(0), (), {}),
    "scores_of_one_sign": (MASKED, (-1, 100.0), {}),
    "affinely_changed": (MASKED, ("kv", 2, 3, None, -3.0, 1.0), {}),
    "entries_set": (MASKED, ("kv", ([0, 1], [1, 0], [5, 2]), float("-inf")), {}),
    "with_bad_score_mod": (MASKED, ("bias", "a bias one key short"), {}),
    "with_arrays": (build(n_q=2, n_k=2, d=2, d_v=2), (), {"q": [[[[30.0, 0.0], [-30.0, 0.0]]]]}),
    "integer_scored": (build(n_q=12, n_k=12, d=16, d_v=3), (7,), {}),
    "residue_masked": (build(n_q=12, n_k=12, d=2), (), {}),
    "ladder_of_gaps": (build(n_q=16, n_k=16, d=16, d_v=16), (745.0, 746.0), {}),
    "prior_appended": (build(n_q=4, n_k=4, d=15, d_v=3, seed=2), ([-3.0, 0.0, -1.0, -2.0], 4.0), {}),
    "self_attention_of_keys": (SIXTEEN, (True,), {}),
    "unit_inputs": (SIXTEEN, (), {}),
    "keys_of_lengths": (SIXTEEN, (), {}),
    "cosine_directions": (SIXTEEN, (), {}),
    "hadamard_rotated": (SIXTEEN, (103,), {}),
    "dual_basis_changed": (SIXTEEN, (103, [2.0, 0.5]), {}),
    "queries_seek_keys": (SIXTEEN, (5.0,), {}),
    "rope_rotated": (TOKENS, ([1000] * 8,), {}),
    "rope_projected": (TOKENS, (list(range(1000, 1008)), 60_000), {}),
    "sinusoidally_encoded": (TOKENS, (), {}),
}


def test_every_step_of_the_project_has_an_example():
    project = {name for name, step in steps().items()
               if step.__module__ in ("specs.problems", "specs.derivations", "specs.constructions")}
    assert project == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_derived_problem_is_rebuilt_bit_for_bit_from_its_code(name):
    """Its code (and its one-line repr, report.json's counterexample) gives the same recipe, arrays (NaNs and signed
    zeros included), mask and keywords, and the step left the problem it derives from as it was."""
    problem, args, kwargs = EXAMPLES[name]
    derived = problem.derive(steps()[name], *args, **kwargs).derive(queries_scaled, 0.5)
    check_code(derived)
    again = rebuild(repr(derived))
    assert repr(again) == repr(derived)
    assert all(line in repr(derived) for line in ("queries_scaled(p, 0.5)", f"{name}(p"))


def test_a_step_called_directly_is_remembered_as_derive_remembers_it():
    """The snippet calls steps directly: the problem it makes carries the same steps, so a failure inside the repro
    can write its own repro."""
    problem = MASKED.derive(derivations.values_of, "ones")
    direct = derivations.values_of(MASKED, "ones")
    assert repr(direct) == repr(problem) and direct.steps == problem.steps
    check_code(direct)


def test_the_keyword_edges_and_bad_values_rebuild():
    base = build(batch=2, heads=2, n_q=3, n_k=4, d=2, d_v=2, seed=1, mask_layout="query_key")
    derived = [with_scale(base, edge) for edge in SCALE_VALUES + SCALE_TYPES]
    derived += [base.derive(derivations.with_bad_score_mod, keyword, label)
                for keyword, labels in BAD_SCORE_MODS.items() for label in labels]
    derived += [base.derive(step, *arguments) for _, step, arguments in LSE_SCORE_EDGES if step is not None]
    for problem in derived:
        check_code(problem)
    edge = next(e for e in SCALE_TYPES if e.label == "a 0-d array" and np.asarray(e.value).dtype == np.float32)
    assert with_scale(base, edge).code().splitlines()[-1] == (
        "p = with_keywords(p, scale=np.array(-1.0, dtype=np.float32))  # a 0-d array")


def test_a_mask_edge_is_its_pattern_at_its_shape():
    from specs.keyword_edges import Edge

    base = build(batch=2, heads=1, n_q=3, n_k=4, d=2, seed=1)
    edge = Edge("mask", "shows one key per row, rank 3", np.eye(4, dtype=bool)[[1, 2, 3]].reshape(1, 3, 4),
                ("shows one key per row", (1, 3, 4), [1, 2, 3]))
    masked = with_mask(base, edge)
    check_code(masked)
    np.testing.assert_array_equal(masked.mask, edge.value)
    assert edge.describe() == ("mask=with_mask_pattern(p, 'shows one key per row', (1, 3, 4), [1, 2, 3]) "
                               "(shows one key per row, rank 3)")


def test_the_snippet_imports_each_step_it_calls():
    problem = MASKED.derive(derivations.positions_taken, keys=[1, 0, 2, 3, 4, 5]).derive(
        constructions.keys_of_lengths)
    snippet = repro_snippet(problem, target=TILED, dtype="float64", layout="contiguous",
                            causal_alignment="top_left")
    assert snippet.splitlines()[:3] == ["from specs.problems import build",
                                        "from specs.derivations import positions_taken",
                                        "from specs.constructions import keys_of_lengths"]


@problem_step
def unseeded_values(p):
    """A step that draws other numbers each time it is called: its line does not rebuild what it made."""
    return p.replace(v=np.random.default_rng().standard_normal(p.v.shape))


@problem_step
def writes_its_input(p):
    p.v[0] = 0.0
    return p


def test_a_step_whose_line_does_not_rebuild_the_problem_is_refused():
    """check_code catches it; the harness calls it before writing a snippet, so a metamorphic pair on it (its v
    differs, so the pair fails) prints why it has no snippet instead of a line that rebuilds another problem."""
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=1)
    bad = problem.derive(unseeded_values)
    with pytest.raises(CodeMismatch, match="does not rebuild its v"):
        check_code(bad)
    with pytest.raises(CodeMismatch):
        repro_snippet(bad, target=TILED, dtype="float64", layout="contiguous", causal_alignment="top_left")
    with pytest.raises(PropertyViolation) as failed:
        Trial(Variant(load_impl(TILED), "float64"), problem).expect_unchanged(bad, what="out", versus="out")
    assert failed.value.repro.startswith("# no snippet: writing it raised CodeMismatch: the code of")
    assert "does not rebuild its v" in str(failed.value)


def test_what_would_print_a_misleading_line_is_refused():
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=1)
    with pytest.raises(ValueError, match="is not a @problem_step"):
        problem.derive(lambda p: p.replace(v=2 * p.v))
    with pytest.raises(NotALiteral, match="not written as a literal"):
        problem.derive(derivations.values_affine, 2.0, object())
    with pytest.raises(ValueError, match="changes the v of the problem it derives from"):
        problem.derive(writes_its_input)
    with pytest.raises(ValueError, match="module-level function"):
        problem_step(lambda p: p)

    def nested(p):
        return p

    with pytest.raises(ValueError, match="module-level function"):
        problem_step(nested)


@pytest.mark.parametrize("text, named", [
    ("", "needs a problem's repr"),
    ("build(n_q=2", "is not a problem's code"),
    ("__import__('os')", "builds no problem"),
    ("build(n_q=2); p = os.system('x')", "is not a known step"),
    ("build(n_q=2); p = values_of(p, kind)", "is not a literal"),
    ("build(n_q=2); p = values_of(q, 'ones')", "is not a known step called on p"),
    ("build(n_q=2); values_of(p, 'ones')", "is not a problem's line"),
    ("build(**{'n_q': 2})", "are not a problem's arguments"),
    ("build(n_q=2); p = values_of(p, 'twice')", "values_of takes one of"),
    ("examples._problem(1)", "builds no problem"),
    ("build(n_q=2, n_k=3); p = with_mask_pattern(p, 'shows one key per row', (1, 3), [0, 1])", "needs 1 row keys in"),
])
def test_rebuild_names_what_it_cannot_read(text, named):
    with pytest.raises(AttentionInputError, match=named):
        rebuild(text)


CALLS_FOLDER = "ATTN_TEST_RECORDED_CALLS"  # where recorded_positional_bias saves what each call received


def recorded_positional_bias(q, k, v, *, scale=None):
    """zoo.declared.positional_bias (keys are not exchangeable), saving what each call received."""
    folder = Path(os.environ[CALLS_FOLDER])
    np.savez(folder / f"call-{len(list(folder.iterdir())):03d}.npz", q=q, k=k, v=v)
    return positional_bias(q, k, v, scale=scale)


def _calls(folder: Path) -> list[dict]:
    return [dict(np.load(path)) for path in sorted(folder.iterdir())]


def test_the_repro_of_a_failing_metamorphic_check_feeds_the_implementation_the_same_arrays(tmp_path, monkeypatch):
    """The snippet of a failing expect_unchanged, run on its own in a subprocess, replays the property's comparison:
    it calls the implementation with the exact q, k, v the check passed it, in the same order, and fails alike."""
    target = f"{__name__}:recorded_positional_bias"
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=2)
    moved = problem.derive(derivations.positions_taken, keys=[3, 1, 0, 2])
    (tmp_path / "check").mkdir()
    monkeypatch.setenv(CALLS_FOLDER, str(tmp_path / "check"))
    with pytest.raises(PropertyViolation) as failure:
        Trial(Variant(load_impl(target), "float64"), problem).expect_unchanged(moved, what="out(k, v permuted)",
                                                                               versus="out")
    (tmp_path / "repro").mkdir()
    done = subprocess.run([sys.executable, "-c", failure.value.repro], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, CALLS_FOLDER: str(tmp_path / "repro")}, timeout=120, check=False)
    assert done.returncode != 0 and failure.value.summary in done.stderr, "the snippet raises the same violation"
    replayed, checked = _calls(tmp_path / "repro"), _calls(tmp_path / "check")
    assert len(replayed) == len(checked) == 4, "the snippet calls the implementation as the check did"
    for again, original in zip(replayed, checked, strict=True):
        assert all(again[name].tobytes() == original[name].tobytes() for name in "qkv")
