"""The report writers: the certification table, the toy study, DySpec and ADED, kernels, the gate summary and the
theorem checks."""
