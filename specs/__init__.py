"""The specification: claim catalogue, float64 oracle, tolerance model, problem generators."""
