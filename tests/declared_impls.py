"""Outside implementations with declared defects, for tests/test_declarations.py (CONTRACT 1: plain
functions, no import of the suite). Each shows one way a declaration is scoped."""

import numpy as np


def _softmax(scores):
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    return e / e.sum(axis=-1, keepdims=True)


def mask_after_softmax(q, k, v, *, scale=None, mask=None):
    """Applies the boolean mask to the weights after the softmax, without renormalising."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    weights = _softmax(q @ k.swapaxes(-1, -2) * s)
    if mask is not None:
        weights = np.where(mask, weights, 0.0)
    return weights @ v


def _declaring(**scope):
    """A copy of mask_after_softmax declaring one scope of sdpa-formula."""

    def fn(q, k, v, *, scale=None, mask=None):
        return mask_after_softmax(q, k, v, scale=scale, mask=mask)

    fn.known_defects = {"sdpa-formula": {"why": "declared for the test", **scope}}
    return fn


# The masking bug fails test_masked_attention_matches_oracle in float64 with a tolerance failure.
declares_the_failure = _declaring(dtypes=("float64",), properties=("test_masked_attention_matches_oracle",))
declares_other_dtype = _declaring(dtypes=("float16",), properties=("test_masked_attention_matches_oracle",))
declares_other_dtype.attention_capabilities = {"dtypes": ("float64", "float16")}
declares_other_property = _declaring(dtypes=("float64",), properties=("test_output_matches_oracle",))
declares_other_message = _declaring(dtypes=("float64",), match=r"returned (nan|inf) at out")
declares_matching_message = _declaring(dtypes=("float64",), match=r"out differs from the float64 oracle")
declares_a_misspelt_property = _declaring(dtypes=("float64",), properties=("test_masked_attention_matches_orcale",))
bare_string = _declaring()
bare_string.known_defects = {"sdpa-formula": "overflows on huge scores in float16"}


def weights_outside_unit_interval(q, k, v, *, scale=None):
    """Weights 2 P - 1/n_k: every row still sums to 1, but small weights turn negative."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    weights = 2 * _softmax(q @ k.swapaxes(-1, -2) * s) - 1.0 / k.shape[2]
    return weights @ v


def always_raises(q, k, v):
    raise RuntimeError("kernel launch failed")
