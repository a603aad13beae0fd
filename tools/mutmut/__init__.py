"""Mutation testing's tools (tox -e mutants): the equivalent mutants, their classification, the score."""
