"""The checks behind the seed-code properties (properties/test_seed_code.py, test_seed_hardware.py,
test_seed_kernels.py): each refuses a deliberately wrong input, passes a correct one written in an
unusual but legitimate way, and, on the seed's own code, fails with a message its claim's
`refutation` matches (and only that message counts as the expected failure)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from specs.catalogue import load_claims

torch = pytest.importorskip("torch", reason="the seeds' code is written in torch")

from harness.api.peak_memory import Probe, growth, peak_bytes  # noqa: E402
from impls.cuda.gpu_limits import DeviceLimits  # noqa: E402
from impls.seeds.seed_code.seed002_blockwise import HardwareAwareAttention  # noqa: E402
from impls.seeds.seed_code.seed002_readings import differential_geometric_attention  # noqa: E402
from properties.seed_code_checks import (  # noqa: E402
    more_peaked_than_prescribed,
    never_called,
    raised_as_written,
    unused_nested_functions,
)
from properties.seed_hardware_checks import (  # noqa: E402
    BLOCK_GRID,
    MEMORY_SEQ,
    SEED_FORMULA,
    attention_tensors,
    block_overflow,
    dtype_blindness,
    footprint_shortfall,
    hardware_blindness,
    layout_mismatch,
    quadratic_memory,
)
from properties.seed_kernel_checks import (  # noqa: E402
    device_register_excess,
    register_file_excess,
    shared_limit_mismatch,
)
from specs.problems import build  # noqa: E402
from specs.tolerance import forward_allowance  # noqa: E402


def refutes(slug: str, message: str | None) -> bool:
    """Whether a property failing with `message` (a plain AssertionError) is the refutation of `slug`."""
    return message is not None and re.search(load_claims()[slug].refutation, f"AssertionError: {message}") is not None


# -- seed 000: the three lines ----------------------------------------------------------------------------
THREE_LINES = load_claims()["three-line-code-as-written"].original


def test_three_lines_as_written_raise_the_name_error():
    assert refutes("three-line-code-as-written", raised_as_written(THREE_LINES))


@pytest.mark.parametrize("definition", [
    "sqrt_dim = K.shape[-1] ** 0.5; ",
    "import math; sqrt_dim = math.sqrt(K.size(-1)); ",  # math imported by the code itself
    "sqrt_dim = torch.tensor(float(K.shape[-1])).sqrt(); ",  # a 0-d tensor broadcasts
])
def test_three_lines_with_sqrt_dim_defined_run(definition):
    assert raised_as_written(definition + THREE_LINES) is None


def test_a_different_error_is_not_the_refutation():
    broken = "sqrt_dim = 2.0; " + THREE_LINES.replace("torch.softmax", "torch.softmaxx")
    raised = raised_as_written(broken)
    assert raised is not None and "AttributeError" in raised
    assert not refutes("three-line-code-as-written", raised)


# -- seed 000: the flash_attention example's scale --------------------------------------------------------
def test_scale_one_at_d64_is_refuted():
    assert refutes("snippet-scale-keeps-softmax-flat", more_peaked_than_prescribed(1.0))


def test_a_scale_near_the_prescribed_one_passes():
    assert more_peaked_than_prescribed(1.1 * 2.0**-3) is None  # 10% off 1/8, written as a power of two


def test_a_larger_wrong_scale_is_refuted_too():
    assert more_peaked_than_prescribed(2.0) is not None


# -- seed 002: tangent_projection --------------------------------------------------------------------------
def test_the_seed_never_calls_tangent_projection():
    assert unused_nested_functions(differential_geometric_attention) == ["tangent_projection"]
    assert refutes("differential-tangent-projection",
                   never_called(differential_geometric_attention, "tangent_projection"))


def _calls_its_helper(query, key):
    def tangent_projection(q, k):
        return q @ k.T

    return tangent_projection(query, key)


def _uses_its_helper_through_a_closure(query, key):
    def tangent_projection(q, k):
        return q @ k.T

    def apply(pair):
        return tangent_projection(*pair)

    return next(map(apply, [(query, key)]))


def _calls_the_other_helper(query, key):
    def tangent_projection(q, k):
        return q @ k.T

    def plain_scores(q, k):
        return q @ k.T

    return plain_scores(query, key)


@pytest.mark.parametrize("fn", [_calls_its_helper, _uses_its_helper_through_a_closure])
def test_a_helper_that_is_used_passes(fn):
    assert never_called(fn, "tangent_projection") is None


def test_a_helper_defined_beside_the_one_called_is_unused():
    assert unused_nested_functions(_calls_the_other_helper) == ["tangent_projection"]
    assert refutes("differential-tangent-projection", never_called(_calls_the_other_helper, "tangent_projection"))


# -- seed 002: the memory formula ---------------------------------------------------------------------------
def _counted_per_tensor(q, k, v) -> int:
    """A correct footprint, computed from shapes and element sizes rather than from the tensors."""
    rows = math.prod(q.shape[:-1])
    inputs = sum(x.numel() for x in (q, k, v)) * q.element_size()
    return inputs + (2 * rows * k.shape[-2] + rows * v.shape[-1]) * q.element_size()


def _no_output(q, k, v) -> int:
    """Wrong in another way than the seed: both n_q x n_k matrices, but no output."""
    return sum(t.numel() * t.element_size() for name, t in attention_tensors(q, k, v).items() if name != "output")


def _drops_heads(q, k, v) -> int:
    """Wrong for 4-D: reads the matrix as batch * seq_q * seq_k, forgetting the heads."""
    return (sum(x.numel() for x in (q, k, v)) + 2 * q.shape[0] * q.shape[-2] * k.shape[-2]
            + math.prod(q.shape[:-1]) * v.shape[-1]) * q.element_size()


def _zeros(*shapes, dtype=torch.float32):
    return tuple(torch.zeros(shape, dtype=dtype) for shape in shapes)


def test_the_seed_formula_leaves_out_weights_and_output():
    assert refutes("memory-footprint-formula", footprint_shortfall(SEED_FORMULA, *_zeros((2, 5, 4), (2, 7, 4),
                                                                                         (2, 7, 4))))


def test_the_seed_formula_ignores_the_dtype():
    shapes = ((2, 5, 4), (2, 7, 4), (2, 7, 4))
    for dtype in (torch.float16, torch.float64):
        assert refutes("memory-footprint-formula", dtype_blindness(SEED_FORMULA, shapes, dtype))


def test_the_seed_formula_misreads_the_four_d_layout():
    assert refutes("memory-footprint-formula", layout_mismatch(SEED_FORMULA, *_zeros((2, 3, 5, 4), (2, 3, 7, 4),
                                                                                     (2, 3, 7, 4))))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_a_correct_formula_passes_all_three_checks(dtype):
    assert footprint_shortfall(_counted_per_tensor, *_zeros((2, 5, 4), (2, 7, 4), (2, 7, 4), dtype=dtype)) is None
    assert dtype_blindness(_counted_per_tensor, ((2, 5, 4), (2, 7, 4), (2, 7, 4)), dtype) is None
    assert layout_mismatch(_counted_per_tensor, *_zeros((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4))) is None


def test_wrong_formulas_fail_without_being_the_seed_refutation():
    no_output = footprint_shortfall(_no_output, *_zeros((2, 5, 4), (2, 7, 4), (2, 7, 4)))
    assert no_output is not None and not refutes("memory-footprint-formula", no_output)
    no_heads = layout_mismatch(_drops_heads, *_zeros((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4)))
    assert no_heads is not None and not refutes("memory-footprint-formula", no_heads)


# -- seed 002: peak memory of the blockwise classes ---------------------------------------------------------
def test_torch_key_blocks_is_attention():
    from tests.fixtures.memory_impls import torch_key_blocks

    p = build(n_q=37, n_k=1100, d=16, d_v=16)
    oracle, allowance = forward_allowance(p.q, p.k, p.v, dtype="float64")
    assert np.all(np.abs(torch_key_blocks(p.q, p.k, p.v).numpy() - oracle.out) <= allowance.bound)


def test_peak_memory_tells_linear_from_quadratic():
    """Measured from this (large, torch-holding) process: the children's peaks are their own."""
    peaks = peak_bytes({name: Probe(f"tests.fixtures.memory_impls:{name}", MEMORY_SEQ)
                        for name in ("torch_key_blocks", "torch_full_matrix")})
    linear, quadratic = growth(peaks["torch_key_blocks"]), growth(peaks["torch_full_matrix"])
    assert quadratic_memory("torch_key_blocks", peaks["torch_key_blocks"], linear) is None
    assert refutes("blockwise-classes-memory-linear",
                   quadratic_memory("torch_full_matrix", peaks["torch_full_matrix"], linear)), (linear, quadratic)


# -- seed 002: the hardware-aware block size ----------------------------------------------------------------
class ConstantBlock(HardwareAwareAttention):
    """Wrong: a block that always fits, chosen without looking at the hardware."""

    def calculate_optimal_block_size(self, d_model, seq_len):
        return 1


class SharedMemoryBlock(HardwareAwareAttention):
    """Adapts: the most rows of float32 Q, K, V the recorded shared memory holds, in whole warps when it
    holds at least one warp's worth."""

    def calculate_optimal_block_size(self, d_model, seq_len):
        rows = max(1, self.max_shared_memory // (3 * d_model * 4))
        return min(seq_len, rows - rows % self.warp_size if rows >= self.warp_size else rows)


def test_the_seed_block_size_is_refuted_both_ways():
    assert refutes("hardware-aware-block-size", hardware_blindness())
    assert refutes("hardware-aware-block-size", block_overflow(HardwareAwareAttention(512, 4096), 512, 4096))


def test_a_constant_block_fails_though_it_always_fits():
    assert refutes("hardware-aware-block-size", hardware_blindness(ConstantBlock))
    assert all(block_overflow(ConstantBlock(d, n, device=device), d, n) is None
               for d, n in BLOCK_GRID for device in ("cuda", "cpu"))


def test_a_block_chosen_from_the_shared_memory_passes():
    assert hardware_blindness(SharedMemoryBlock) is None
    assert all(block_overflow(SharedMemoryBlock(d, n, device=device), d, n) is None
               for d, n in BLOCK_GRID for device in ("cuda", "cpu"))


# -- seed 002: the GPU constants ----------------------------------------------------------------------------
def test_ptxas_registers_refute_a_32_kb_file():
    assert refutes("gpu-register-file", register_file_excess({"sm_90": 64, "sm_120": 64}))
    assert register_file_excess({"sm_10": 8}) is None  # 1024 threads x 8 registers x 4 bytes = 32 KB: fits


def test_device_registers_refute_a_32_kb_file():
    assert refutes("gpu-register-file", device_register_excess(DeviceLimits("NVIDIA H200", "sm_90", 65536, 49152)))
    assert device_register_excess(DeviceLimits("GeForce 8800 GTX", "sm_10", 8192, 16384)) is None


def test_shared_memory_limit_check():
    assert shared_limit_mismatch({"sm_75": 49152, "sm_90": 49152}) is None
    assert "sm_90 65536" in shared_limit_mismatch({"sm_75": 49152, "sm_90": 65536})
    assert "sm_90 at least" in shared_limit_mismatch({"sm_90": None})
