"""The pytest plugin: the suite's options and Hypothesis profiles, selection of
implementations, and the run's collection of outcomes into a report."""
