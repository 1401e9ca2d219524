"""The report writers: the toy study, DySpec's dynamic trees, the torch kernels and the gate's summaries."""
