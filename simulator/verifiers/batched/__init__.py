"""The array rules: each rule's batched form, one function per rule family, deciding ``B`` trees of one topology at
once exactly as the reference does on the same uniforms, on numpy (Monte Carlo) and on torch, CPU or CUDA (the
torch path)."""
