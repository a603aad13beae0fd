"""CONTRACT 1, the implementation protocol: signature rules, capabilities, loading, declared defects and
tensor conversion. specs sits below it; impls, the harness and the properties import it."""
