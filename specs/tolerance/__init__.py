"""The one tolerance model: how far an implementation's output may be from the oracle. Every comparison in the
suite asks this package for its allowance.

- specs.tolerance.model: the forward model (the float64 a-priori bound, FlashAttention's rule for lower
  precisions, the log-sum-exp, an implementation's own rounding) and Allowance itself;
- specs.tolerance.algebra: allowances carried through the float64 computations a property makes;
- specs.tolerance.gradient_bounds: the same model carried through the backward;
- specs.tolerance.reading_bounds: the bounds of what the interpretations compute from checked weights.

Every public name is re-exported here: `from specs.tolerance import X`.
"""

from specs.tolerance.algebra import (
    affine_image_allowance,
    difference_allowance,
    dot_product_allowance,
    dropout_survivor_allowance,
    elementwise_product_allowance,
    merge_allowance,
    metamorphic_allowance,
    product_allowance,
    row_sum_allowance,
    value_shift_allowance,
)
from specs.tolerance.gradient_bounds import (
    K_GRADIENT,
    OPERANDS_BELOW_NORMAL,
    STORED_OUTPUT_UNDERFLOW,
    GradientOracle,
    directional_derivative_allowance,
    gradient_allowance,
)
from specs.tolerance.model import (
    K_FORWARD,
    LAMBDA,
    SAFETY,
    SUPPORTED_DTYPES,
    Allowance,
    Model,
    Term,
    ToleranceUndefined,
    exponent_range,
    forward_allowance,
    fused_difference_allowance,
    lse_allowance,
    merge_order_allowance,
    merged_terms,
    own_rounding_bound,
    rounding_below_normal,
    score_perturbation_allowance,
    unit_roundoff,
)
from specs.tolerance.reading_bounds import (
    SIMPLEX_OPTIMIZER_VALUE_TOLERANCE,
    cosine_exponent_allowance,
    entropy_allowance,
    entropy_regularised_gap_allowance,
    jacobian_norm_allowance,
    normalised_weights_allowance,
    rope_score_allowance,
    rotated_inputs_allowance,
    row_entropy_allowance,
    temperature_limit,
    underflow_gap_window,
    unit_vector_allowance,
    weights_entropy_allowance,
)

__all__ = [
    "K_FORWARD", "K_GRADIENT", "LAMBDA", "OPERANDS_BELOW_NORMAL", "SAFETY", "SIMPLEX_OPTIMIZER_VALUE_TOLERANCE",
    "STORED_OUTPUT_UNDERFLOW", "SUPPORTED_DTYPES",
    "Allowance", "GradientOracle", "Model", "Term", "ToleranceUndefined", "affine_image_allowance",
    "cosine_exponent_allowance", "difference_allowance", "directional_derivative_allowance", "dot_product_allowance",
    "dropout_survivor_allowance", "elementwise_product_allowance", "entropy_allowance",
    "entropy_regularised_gap_allowance", "exponent_range", "forward_allowance", "fused_difference_allowance",
    "gradient_allowance", "jacobian_norm_allowance", "lse_allowance", "merge_allowance", "merge_order_allowance",
    "merged_terms",
    "metamorphic_allowance", "normalised_weights_allowance", "own_rounding_bound", "product_allowance",
    "rope_score_allowance", "rotated_inputs_allowance", "rounding_below_normal", "row_entropy_allowance",
    "row_sum_allowance",
    "score_perturbation_allowance", "temperature_limit", "underflow_gap_window", "unit_roundoff",
    "unit_vector_allowance", "value_shift_allowance", "weights_entropy_allowance",
]
