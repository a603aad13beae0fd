"""The machinery that runs properties against implementations and reports verdicts."""
