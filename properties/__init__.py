"""Generic properties, one module per area; each checks claims of specs/claims.toml."""
