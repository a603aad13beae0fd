"""`attention-spec`: check implementations with the installed suite, compare two reports."""
