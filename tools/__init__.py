"""Tools run by hand from a checkout (not shipped in the wheel): gpu-check, the prepared check for a lent GPU."""
