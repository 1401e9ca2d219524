"""Torch and Triton kernels nobody here wrote, certified as verifiers: loading a kernel, the adapters for its
calling convention, and the capture of its random ops (docs/kernels.md)."""
