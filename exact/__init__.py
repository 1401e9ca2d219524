"""specproof exact engine: enumeration of every draft tree and random choice, output laws, certificates, exact
recursions (:mod:`exact.recursions`) and the symbolic prover (:mod:`exact.prove`)."""

from .certificate import FLOAT_TOLERANCE, Certificate, certify, fixed_tree_law, round_law
from .law import Counterexample, OutputLaw

__all__ = ["FLOAT_TOLERANCE", "Certificate", "Counterexample", "OutputLaw", "certify", "fixed_tree_law",
           "round_law"]
