"""Tests that run the suite as a user does (tests.fixtures.runs.run_suite, or pytest in a
subprocess): marked `suite_run`, so `-m 'not suite_run'` is the fast loop."""
