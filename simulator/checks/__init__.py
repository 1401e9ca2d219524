"""The regression gate a user points at their verifier, and the mutation zoo that measures it."""
