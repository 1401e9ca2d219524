"""The batched array kernels: one per rule family, beside the references in :mod:`simulator.verifiers`.

A kernel decides a batch of ``B`` draft trees of one topology at once and returns ``(node [B], y [B])``, the
accepted node and the emitted token of each tree, exactly as its reference rule does on the same uniforms (the
same float operations in the same order, float64 on the CPU: identical decisions). It is written once against
the Python array API (``array-api-compat``), so the same source runs on numpy arrays (the Monte Carlo engine)
and on torch tensors, CPU or CUDA (the torch path, ``specproof mc --device cuda``).

A kernel reads a :class:`~simulator.verifiers.batched.frame.Batch`: the tree's structure as arrays, the drafted
tokens ``[B, n]``, a row id per node ``[B, n]`` into a :class:`~simulator.verifiers.batched.frame.RowSource`
(the model's rows per context for Monte Carlo, the given rows of each tree and node for the torch path) and a
uniform stream (each tree's uniforms, read in the reference's order). The registry names each rule's kernel
(:class:`~simulator.verifiers.batched.frame.KernelRef`); engines look it up there and never by the rule's name.
"""
