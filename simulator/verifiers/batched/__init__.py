"""The array rules: each rule's batched form, one function per rule family, beside the references in
:mod:`simulator.verifiers`.

An array rule decides a batch of ``B`` draft trees of one topology at once and returns ``(node [B], y [B])``, the
accepted node and the emitted token of each tree, exactly as its reference rule does on the same uniforms (the
same float operations in the same order, float64 on the CPU: identical decisions). It is written once against
the Python array API (``array-api-compat``), so the same source runs on numpy arrays (the Monte Carlo engine)
and on torch tensors, CPU or CUDA (the torch path, ``specproof mc --device cuda``).

An array rule reads a :class:`~simulator.verifiers.batched.frame.Batch`: the tree's structure as arrays, the
drafted tokens ``[B, n]``, a row id per node ``[B, n]`` into a :class:`~simulator.verifiers.batched.frame.RowSource`
(the model's rows per context for Monte Carlo, the given rows of each tree and node for the torch path) and a
uniform stream (each tree's uniforms, read in the reference's order). The lifts of a single-step rule — token
verification (:mod:`.token_tree`) and Layer Verification (:mod:`.layer`) — receive that rule as its array step
(:class:`~simulator.verifiers.single_step_arrays.ArrayStep`), written beside its reference, and call it. The
registry names each rule's array rule with its options (:class:`~simulator.verifiers.batched.ref.ArrayRuleRef`);
engines look it up there and never by the rule's name.
"""
