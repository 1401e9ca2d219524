"""The regression gate: batteries of certificates, hunting, shrinking, the pytest helpers and the mutation zoo
(docs/gate.md)."""
