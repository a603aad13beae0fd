"""A clone's entry point: registers harness.pytest_plugin.options (the suite's options, Hypothesis profiles, report
plugin) and the implementations' plugin modules, which answer the harness's hooks (harness.hookspecs).

An installed suite registers the same modules through its `pytest11` entry points, named after them too, and
pytest then skips this line: a module is registered once.
"""

pytest_plugins = ("harness.pytest_plugin.options", "impls.records", "impls.cuda.resources")
