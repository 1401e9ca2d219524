"""Whole generation loops certified end to end (docs/loops.md): the loop convention, the sampling parameters, the
tiny model pairs loops run on, and the loops specproof knows by name."""
