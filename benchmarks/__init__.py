"""pytest-benchmark: every selected implementation on the same problems, grouped so ratios read side by side."""
