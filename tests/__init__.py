"""The suite's own tests: the oracle against closed forms, the harness, and that every declared defect is caught."""
