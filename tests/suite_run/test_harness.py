"""The harness as users meet it: both --impl forms, ATTN_IMPLS, failing plugins, bad targets, skips."""

from __future__ import annotations

import pytest

from harness.pytest_plugin.plugin import check_required_features
from tests.fixtures.runs import run_suite

FORMULA = ("properties/test_formula.py", "-k", "test_output_matches_oracle")


def test_module_path_form(tmp_path):
    run = run_suite(*FORMULA, "--impl", "impls.numpy.numpy_tiled:tiled_attention", report_dir=tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert run.report["impls"] == ["numpy-tiled[float64]", "numpy-tiled[float32]"]
    assert {v["status"] for v in run.report["verdicts"]} == {"pass"}
    listed = run.report["capabilities"]["numpy-tiled"]
    assert listed["dtypes"] == ["float64", "float32"] and listed["tile_keywords"] and listed["backend"] == "numpy"


def test_impl_checks_only_what_was_named(tmp_path):
    """The oracle and the seeds' own code are the main job's subjects, not the user's."""
    run = run_suite("properties/test_formula.py", "interpretations/test_bayesian.py",
                    "--impl", "tests/fixtures/outside_impls.py:einsum_attention", report_dir=tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert run.report["impls"] == ["tests/fixtures/outside_impls.py:einsum_attention[float64]"]
    assert {v["impl"] for v in run.report["verdicts"]} == set(run.report["impls"])


def test_file_path_form_with_no_set_up(tmp_path):
    run = run_suite(*FORMULA, "--impl", "tests/fixtures/outside_impls.py:einsum_attention", report_dir=tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert run.report["impls"] == ["tests/fixtures/outside_impls.py:einsum_attention[float64]"]
    assert run.verdict("sdpa-formula", "tests/fixtures/outside_impls.py:einsum_attention[float64]")["status"] == "pass"


def test_attn_impls_environment_variable(tmp_path):
    run = run_suite(*FORMULA, report_dir=tmp_path,
                    env={"ATTN_IMPLS": "tests/fixtures/outside_impls.py:einsum_attention,"
                                       "impls.numpy.numpy_paged:paged_attention"})
    assert run.returncode == 0, run.output[-3000:]
    assert run.report["impls"] == ["tests/fixtures/outside_impls.py:einsum_attention[float64]", "numpy-paged[float64]"]


BROKEN = {
    "raises": "the implementation raised ValueError: this implementation always fails",
    "wrong_shape": "returned out of shape",
    "wrong_dtype": "returned out of dtype float32 for float64 inputs",
    "returns_nan": "returned nan at out[0, 0, 0, 0] where the oracle is finite",
    "returns_list": "returned a list as out, not a NumPy, torch or CuPy array",
    "too_slow": "the call took longer than 0.2 s",
}


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory):
    targets = [f"tests/fixtures/outside_impls.py:{name}" for name in BROKEN]
    args = [arg for target in targets for arg in ("--impl", target)]
    return run_suite(*FORMULA, *args, "--impl", "tests/fixtures/outside_impls.py:einsum_attention",
                     "--impl-timeout", "0.2", report_dir=tmp_path_factory.mktemp("broken"))


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_implementation_fails_its_property_with_a_clear_message(broken_run, name):
    verdict = broken_run.verdict("sdpa-formula", f"tests/fixtures/outside_impls.py:{name}[float64]")
    assert verdict["status"] == "fail" and not verdict["declared"]
    assert BROKEN[name] in verdict["detail"]
    assert "Variant(load_impl('tests/fixtures/outside_impls.py:" in verdict["counterexample"]["repro"]


def test_run_continues_past_broken_implementations(broken_run):
    assert broken_run.returncode == 1
    einsum = "tests/fixtures/outside_impls.py:einsum_attention[float64]"
    assert broken_run.verdict("sdpa-formula", einsum)["status"] == "pass"
    assert "claims x implementations" in broken_run.output


def test_failure_reads_as_a_bug_report(broken_run):
    """Claim, seed sentence, smallest input, worst element and a repro snippet, in the pytest output."""
    text = broken_run.output
    assert "[sdpa-formula] Every implementation computes softmax" in text
    assert "seed: 000_7a81042443dec018.txt § 注意力机制的Q、K、V" in text
    assert "input: q (1, 1, 1, 1)" in text  # shrunk to the smallest problem
    assert "reproduce:" in text and "p = build(" in text


@pytest.mark.parametrize("target, message", [
    ("no_such_module:fn", "No module named 'no_such_module'"),
    ("tests/no_such_file.py:fn", "no such file"),
    ("impls.numpy.numpy_tiled:no_such_fn", "has no attribute 'no_such_fn'"),
    ("impls.numpy.numpy_tiled", "expected 'module.path:function' or 'path/to/file.py:function'"),
    ("impls.numpy.numpy_tiled:check_block_size", "must take q, k, v positionally"),
    ("tests/fixtures/outside_impls.py:bad_capabilities", "unknown capabilities ['flash']"),
    ("tests/fixtures/outside_impls.py:declares_an_unknown_dtype",
     "unknown dtypes ['bf16'] declared; valid: float64, float32, float16, bfloat16"),
])
def test_bad_target_is_a_usage_error_naming_the_problem(target, message):
    run = run_suite(*FORMULA, "--impl", target)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert message in run.output


def test_missing_keywords_become_skips_with_reasons(tmp_path):
    run = run_suite("properties/test_masking.py", "properties/test_formula.py",
                    "--impl", "tests/fixtures/outside_impls.py:plain_qkv_only", report_dir=tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    name = "tests/fixtures/outside_impls.py:plain_qkv_only[float64]"
    causal = run.verdict("causal-mask-zeroes-future", name)
    assert causal["status"] == "skip" and "lacks 'causal'" in causal["detail"]
    assert run.verdict("boolean-mask-hides-keys", name)["detail"].endswith("no `mask` keyword)")
    assert run.verdict("sdpa-formula", name)["status"] == "pass"


def test_unknown_backend_is_a_usage_error_naming_the_valid_ones():
    run = run_suite(*FORMULA, "--backend", "cuppy")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "unknown backend 'cuppy'; valid: numpy, torch, cupy" in run.output


def test_a_misspelt_required_feature_stops_the_run():
    """requires("crosss") would skip its property on every implementation: refused at collection."""

    class Item:
        nodeid = "properties/test_x.py::test_y"

        def get_closest_marker(self, name):
            return pytest.mark.requires("crosss").mark if name == "requires" else None

    with pytest.raises(pytest.UsageError, match=r"unknown features \['crosss'\]; valid: .*cross"):
        check_required_features([Item()])


def test_backend_without_implementations_runs_the_rest(tmp_path):
    """--backend cupy where none of its records can run (no CUDA device, and CXX names no compiler, so the
    CPU records cannot build): impl properties skip, oracle checks still run."""
    run = run_suite("properties/test_formula.py", "properties/test_heads.py", "--backend", "cupy",
                    report_dir=tmp_path, env={"CXX": "no-such-compiler"})
    assert run.returncode == 0, run.output[-3000:]
    assert "oracle" in run.report["impls"]
    assert not any(name.endswith("]") for name in run.report["impls"]), "no implementation variant should run"
