"""Calling an implementation: the run's context, the state a call depends on, guarded and isolated
calls, gradients, which failures are expected, and the verdicts a run reaches."""
