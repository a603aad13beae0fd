"""The suite's unit tests: each module checks one part in this process (no whole-suite run)."""
