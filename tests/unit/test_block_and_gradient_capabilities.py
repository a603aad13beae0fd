"""min_block_size (the smallest block its tile keywords take) and differentiable=False (a forward-only kernel on
tensors): what they change, and the declarations loading refuses (protocol.registry)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from protocol import triton_interpreter
from protocol.registry import ImplLoadError, load_impl
from specs.strategies import block_sizes

FIXTURES = "tests/fixtures/capability_impls.py"


def test_a_forward_only_kernel_on_tensors_has_no_gradients_and_says_why():
    caps = load_impl(f"{FIXTURES}:forward_only").capabilities
    assert caps.tensors == "torch" and not caps.gradients
    assert caps.lacking("gradients") == ("implementation lacks 'gradients' (neither tensors='torch' with a "
                                         "differentiable output (autograd) nor fn.attention_backward)")


def test_a_kernel_on_tensors_is_differentiable_unless_it_says_otherwise():
    assert load_impl("impls.torch.torch_flash_records:flash_tiled").capabilities.gradients


@pytest.mark.parametrize("name", ["forward_only_on_arrays", "differentiable_not_a_bool"])
def test_differentiable_is_a_bool_and_false_only_on_tensors(name):
    with pytest.raises(ImplLoadError, match=r"differentiable is True or False, and False only with tensors='torch'"):
        load_impl(f"{FIXTURES}:{name}")


def test_the_smallest_block_is_read():
    assert load_impl(f"{FIXTURES}:tiles_of_sixteen").capabilities.min_block_size == 16


@pytest.mark.parametrize("name", ["smallest_block_without_blocks", "smallest_block_zero"])
def test_the_smallest_block_is_positive_and_needs_tile_keywords(name):
    with pytest.raises(ImplLoadError, match=r"min_block_size must be a positive int, and above 1 only with "
                                            r"tile_keywords"):
        load_impl(f"{FIXTURES}:{name}")


@settings(max_examples=200, derandomize=True, database=None)
@given(st.data())
def test_block_sizes_start_at_the_smallest_block(data):
    assert 16 <= data.draw(block_sizes(min_block=16)) <= 65


def test_block_sizes_still_reach_one_and_the_smallest_block():
    """The edges stay drawable: 1 by default, the smallest block where one is declared."""
    assert find(block_sizes(), lambda size: size == 1) == 1
    assert find(block_sizes(min_block=16), lambda size: size <= 16) == 16


@pytest.mark.parametrize(("installed", "gpu", "preset", "expected"), [
    (True, False, None, "1"),  # Triton here, no GPU: the interpreter
    (True, True, None, None),  # a GPU: native kernels
    (False, False, None, None),  # no Triton: nothing to choose
    (True, False, "0", "0"),  # the user's choice is kept
])
def test_the_interpreter_is_chosen_where_triton_is_and_no_gpu(monkeypatch, installed, gpu, preset, expected):
    """interpret_without_gpu writes os.environ itself, which monkeypatch would not undo where the variable was unset
    (it then left TRITON_INTERPRET=1 in the worker, and a rank pool started later waited 60 s for a hung peer)."""
    monkeypatch.setenv(triton_interpreter.VARIABLE, "recorded")  # so that teardown restores the worker's own
    monkeypatch.delenv(triton_interpreter.VARIABLE)
    if preset is not None:
        monkeypatch.setenv(triton_interpreter.VARIABLE, preset)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: (object() if installed else None) if name == "triton"
                        else real_find_spec(name, *args))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    triton_interpreter.interpret_without_gpu()
    assert os.environ.get(triton_interpreter.VARIABLE) == expected
    assert triton_interpreter.interpreting() == (expected == "1")


@pytest.mark.parametrize(("interpreting", "given", "expected"), [
    ("1", None, 1024), ("0", None, None), ("1", "48", 48), ("0", "48", 48)])
def test_a_triton_records_max_seq_is_1024_under_the_interpreter_unless_set(monkeypatch, interpreting, given, expected):
    monkeypatch.setenv(triton_interpreter.VARIABLE, interpreting)
    monkeypatch.delenv(triton_interpreter.MAX_SEQ_VARIABLE, raising=False)
    if given is not None:
        monkeypatch.setenv(triton_interpreter.MAX_SEQ_VARIABLE, given)
    assert triton_interpreter.interpreted_max_seq() == expected


@pytest.mark.parametrize("given", ["0", "-3", "many"])
def test_a_max_seq_that_is_not_a_positive_integer_is_refused_by_name(monkeypatch, given):
    monkeypatch.setenv(triton_interpreter.MAX_SEQ_VARIABLE, given)
    with pytest.raises(ValueError, match="ATTN_TRITON_MAX_SEQ must be a positive integer"):
        triton_interpreter.interpreted_max_seq()
