"""The symbolic prover: a rule run on symbolic rows, the row space cut into cells, each cell's identity checked
exactly (docs/proofs.md)."""
