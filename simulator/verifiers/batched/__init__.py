"""The array rules: each rule's batched form, one function per rule family, beside the references in
:mod:`simulator.verifiers`.

An array rule decides ``B`` draft trees of one topology at once (:class:`~simulator.verifiers.batched.frame.Batch`),
returning ``(node [B], y [B])`` exactly as its reference does on the same uniforms (the same float operations in
the same order; float64 on the CPU). Written against the Python array API (``array-api-compat``), it runs on numpy
(the Monte Carlo engine) and on torch, CPU or CUDA (the torch path).
"""
