"""The peers: attention implementations people use and nobody here wrote, checked as they are (issue 23).

Each record is a thin adapter to one peer's public call, mapping the protocol (CONTRACT 1) to the peer's own
semantics (layout, causal alignment, mask polarity, scale) and documenting that mapping; the peer itself is
imported only when the record is called, so every record loads (and the expectations table is checked) where the
peer is not installed. The records' backend is `peers`: a run checks them only when `--backend peers` names
them (`tox -e peers`, which pins each peer), and their expectations, the findings, are rows of
impls/expectations.toml like any built-in record's, so a peer release that fixes one is an uncaught declaration.
"""
