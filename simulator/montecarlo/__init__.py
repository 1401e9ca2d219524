"""The Monte Carlo engine: the reference path and the batched rounds, the statistics of a run, the toy study's sweep and its store, multi-round generations."""
