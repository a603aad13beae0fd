"""The seed 002 shared-memory kernel's declarations cover the failure it has and no other (CONTRACT 2: a
declaration names the claim *and* how it fails). Unit level, through the harness's own call, output check and
comparison (harness.api.trial) with stand-in outputs in place of the kernel's, and harness.engine.declarations'
matching: the kernel's symptom (NaN from unwritten shared memory; a finite wrong output where the tiling properties'
fewer threads read other threads' rows) is declared, and a different failure of the same claim and property
(a raise, a wrong shape, a finite wrong output where the kernel's is NaN) is an unexpected failure. No kernel
runs here; the run that measured the symptoms is the main job's."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.api.evidence import DeclaredViolation, PropertyViolation
from harness.api.markers import PROPERTIES
from harness.api.trial import check_against_oracle
from harness.engine.declarations import RUNNING, RunningCheck, expected_failure
from impls.cuda import cuda_seed002_kernels as seed002
from protocol.expectations import load_table
from protocol.registry import Variant, load_impl
from specs.catalogue import load_claims
from specs.problems import build
from specs.reference import attention

CPU_RECORD = "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_cpu"
DEVICE_RECORD = "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_device"
CPU_NAME, DEVICE_NAME = "cuda-seed002-shared-memory-kernel-on-cpu", "cuda-seed002-shared-memory-kernel"
ROWS = tuple(row for row in load_table() if row.subject == CPU_NAME)
CHECKED = ("kernel-memory-safe", "kernel-race-free", "kernel-barrier-uniform")  # the CPU checkers' claims
PROBLEM = dict(n_q=9, n_k=9, d=8, d_v=8, seed=3)


def _stand_in(output: Callable[[np.ndarray, np.ndarray, np.ndarray], object]) -> Variant:
    """The CPU record (its name, capabilities and declarations) with `output` called in place of the kernel, in
    this process (a target of its own: the record's target runs isolated, in a worker that loads the kernel)."""
    impl = load_impl(CPU_RECORD)

    def fn(q, k, v, *, block_threads: int = seed002.DEFAULT_THREADS):
        return output(q, k, v)

    return Variant(dataclasses.replace(impl, fn=fn, target=f"{__name__}:{output.__name__}"), "float32")


def _oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)).out


def _violation(variant: Variant, claim: str, prop: str) -> PropertyViolation:
    """What check_against_oracle raises when it runs as `prop` of `claim` (the plugin's RUNNING context)."""
    token = RUNNING.set(RunningCheck(prop, (claim,)))
    try:
        with pytest.raises(PropertyViolation) as info:
            check_against_oracle(variant, build(**PROBLEM))
    finally:
        RUNNING.reset(token)
    return info.value


def _unwritten_shared_memory(q, k, v):  # what the kernel returns on the CPU: sum_exp is NaN in every row
    return np.full(v.shape, np.nan, np.float32)


def _every_row_reads_other_rows(q, k, v):  # finite garbage: the scores of q against q, not k
    return _oracle(q, q, v).astype(np.float32)


def _raises(q, k, v):
    raise RuntimeError("an illegal memory access was encountered")


def _wrong_shape(q, k, v):
    return np.zeros(v.shape[:-1] + (v.shape[-1] + 1,), np.float32)


def _last_row_sees_one_key_less(q, k, v):  # a slightly wrong output: one row misses a key
    out = _oracle(q, k, v)
    out[..., -1, :] = _oracle(q[..., -1:, :], k[..., :-1, :], v[..., :-1, :])[..., 0, :]
    return out.astype(np.float32)


def test_every_declaration_names_its_symptom_on_both_records():
    for target in (CPU_RECORD, DEVICE_RECORD):
        scopes = load_impl(target).known_defects
        assert scopes and all(scope.match for scope in scopes), target
    cpu = {scope.claim for scope in load_impl(CPU_RECORD).known_defects}
    device = {scope.claim for scope in load_impl(DEVICE_RECORD).known_defects}
    assert cpu == {row.claim for row in ROWS} and device == cpu - set(CHECKED) and set(CHECKED) <= cpu
    assert all(row.dtypes == ("float32",) and row.why for row in ROWS)


def test_rows_name_catalogued_claims_and_their_own_properties():
    """A row naming a property its claim does not have would never count as caught (harness.engine.verdicts)."""
    root = Path(__file__).resolve().parents[2]
    for folder in ("properties", "interpretations"):
        for module in sorted((root / folder).glob("test_*.py")):
            importlib.import_module(f"{folder}.{module.stem}")
    claims = load_claims()
    for row in ROWS:
        assert row.claim in claims, row.claim
        registered = {name.rpartition("::")[2] for name in PROPERTIES[row.claim]}
        assert set(row.properties) <= registered, (row.claim, set(row.properties) - registered)


@pytest.mark.parametrize("claim, prop", [
    ("sdpa-formula", "test_output_matches_oracle"),
    ("tiled-equals-global", "test_any_tiling_equals_global_attention"),
])
def test_the_kernels_nan_output_is_declared(claim, prop):
    violation = _violation(_stand_in(_unwritten_shared_memory), claim, prop)
    assert isinstance(violation, DeclaredViolation), violation.message()
    assert "returned nan at out[" in violation.message()


@pytest.mark.parametrize("wrong", [_raises, _wrong_shape, _every_row_reads_other_rows, _last_row_sees_one_key_less])
def test_another_failure_of_sdpa_formula_is_unexpected(wrong):
    variant = _stand_in(wrong)
    violation = _violation(variant, "sdpa-formula", "test_output_matches_oracle")
    assert not isinstance(violation, DeclaredViolation), violation.message()
    assert expected_failure("sdpa-formula", variant, "test_output_matches_oracle", violation.message()) is None


@pytest.mark.parametrize("wrong", [_every_row_reads_other_rows, _last_row_sees_one_key_less])
def test_a_finite_wrong_output_is_declared_for_tiling_only(wrong):
    """Fewer threads per block (block_threads) read other threads' rows: a finite output, not attention."""
    variant = _stand_in(wrong)
    violation = _violation(variant, "tiled-equals-global", "test_any_tiling_equals_global_attention")
    assert isinstance(violation, DeclaredViolation), violation.message()
    for claim, prop in (("sdpa-formula", "test_output_matches_oracle"),
                        ("layout-independent", "test_strided_inputs_give_the_same_attention")):
        assert expected_failure(claim, variant, prop, violation.message()) is None


@pytest.mark.parametrize("wrong", [_raises, _wrong_shape])
def test_another_failure_of_tiled_equals_global_is_unexpected(wrong):
    violation = _violation(_stand_in(wrong), "tiled-equals-global", "test_any_tiling_equals_global_attention")
    assert not isinstance(violation, DeclaredViolation), violation.message()


def test_the_nan_symptom_outside_its_dtype_or_claim_is_unexpected():
    """The row is scoped by its symptom, not by property names: a new property of the claim that meets the
    same NaN is covered, the same NaN in another dtype or claim is not."""
    variant = _stand_in(_unwritten_shared_memory)
    message = _violation(variant, "sdpa-formula", "test_output_matches_oracle").message()
    assert expected_failure("sdpa-formula", variant, "test_some_new_property", message) is not None
    assert expected_failure("sdpa-formula", Variant(variant.impl, "float16"), "test_output_matches_oracle",
                            message) is None
    assert expected_failure("causal-mask-zeroes-future", variant, "test_output_matches_oracle", message) is None


def test_a_scope_by_properties_alone_absorbed_these_failures():
    """The check above has power: the same rows declared by claim and properties only (as before they named
    their symptom) take a raise and a slightly wrong output for the kernel's known defect."""
    impl = load_impl(CPU_RECORD)
    by_properties = tuple(dataclasses.replace(row, match="", properties=("test_output_matches_oracle",))
                          for row in impl.known_defects if row.claim == "sdpa-formula")
    for wrong in (_raises, _last_row_sees_one_key_less):
        variant = _stand_in(wrong)
        variant = Variant(dataclasses.replace(variant.impl, known_defects=by_properties), "float32")
        violation = _violation(variant, "sdpa-formula", "test_output_matches_oracle")
        assert isinstance(violation, DeclaredViolation), violation.message()
