"""The Monte Carlo engine: the reference path and the batched rounds, rows per context, the statistics of a run,
the test designs' pass probabilities, and multi-round generations."""
