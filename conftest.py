"""A clone's entry point: registers harness.options (the suite's options, Hypothesis profiles, report plugin).

An installed suite registers the same module through its `pytest11` entry point, named `harness.options`
too, and pytest then skips this line: a module is registered once.
"""

pytest_plugins = ("harness.options",)
