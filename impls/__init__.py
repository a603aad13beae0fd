"""Implementations under test, one declarative record each (see impls.registry)."""
