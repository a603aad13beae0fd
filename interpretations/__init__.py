"""The seeds' readings of attention (seed 002 § 3.1, seed 001 § 1.3): their code as written, and properties."""
