"""The seeds' code as written (seed_code/) and its records: seed 000's lines, seed 001's multi-head
attention, seed 002's tiled attention."""
